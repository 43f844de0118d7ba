"""Prices of AWS GPU instances, each with its kind and its provenance (data/aws_gpu_prices.csv).

A SageMaker training price is either **quoted** (a row of the file that is an AWS-owned SageMaker *training* price,
or the AWS Price List API's answer for a learner who opts in) or an **estimate**: the instance's EC2 on-demand price
(AWS's Price List, as generated into aws/karpenter-provider-aws) times SageMaker's rate against EC2's in its family,
computed from AWS-owned pairs of figures of the same time (`ratios`). An instance the file cannot price is refused
with the list of those it can.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from utils.paths import DATA

PRICE_FILE = DATA / "aws_gpu_prices.csv"
EC2 = "EC2 on-demand Linux"
TRAINING = "SageMaker training (on-demand)"
#: The Price List API's answer is asked for this location, from this region (its endpoint lives in us-east-1).
LOCATION, PRICING_REGION = "US East (N. Virginia)", "us-east-1"
#: The opt-in lesson 07 uses for every call to AWS (utils.sagemaker_job.ONLINE_FLAG).
ONLINE_FLAG = "COURSE_SAGEMAKER_ONLINE"
#: Families whose SageMaker/EC2 ratio is measured on the same AWS-owned pairs (instance-type prefix -> family).
FAMILIES = {"p4": "P4/P5", "p5": "P4/P5", "g5": "G/P3", "g6": "G/P3", "p3": "G/P3", "trn1": "Trn1"}
#: Two figures of one type form a pair when they are this many days apart at most.
PAIR_DAYS = 60


def table(path: Path | None = None) -> pd.DataFrame:
    """Every row of the price file, with `as_of` parsed where it is a date (NaT otherwise)."""
    path = Path(path or PRICE_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"the price file {path} is missing: it ships with the course (data/)")
    t = pd.read_csv(path)
    t["date"] = pd.to_datetime(t["as_of"], errors="coerce", format="%Y-%m-%d")
    return t


def _usable(t: pd.DataFrame) -> pd.DataFrame:
    return t[(t.status == "ok") & (t.source_owner == "AWS") & t.date.notna()]


def family(instance_type: str) -> str | None:
    """The family whose SageMaker/EC2 ratio applies to `instance_type` (ml. prefix or not), or None."""
    bare = instance_type.removeprefix("ml.")
    for prefix in sorted(FAMILIES, key=len, reverse=True):
        if bare.startswith(prefix):
            return FAMILIES[prefix]
    return None


def ratios(path: Path | None = None) -> pd.DataFrame:
    """SageMaker's price over EC2's for every AWS-owned pair of figures of one type at most PAIR_DAYS apart, or
    where the EC2 price did not move between AWS's snapshots (the only EC2 figure, or all of them equal)."""
    t = _usable(table(path))
    sm = t[t["product"].str.startswith("SageMaker")]
    ec2 = t[t["product"] == EC2]
    rows = []
    for _, s in sm.iterrows():
        same = ec2[ec2.instance_type == s.instance_type.removeprefix("ml.")]
        if same.empty:
            continue
        gap = (same.date - s.date).abs().dt.days
        near = same[gap <= PAIR_DAYS]
        steady = same.usd_per_hour.nunique() == 1
        if near.empty and not steady:
            continue  # EC2's price moved, and no snapshot of the same time: no pair
        e = (near if not near.empty else same).loc[gap[(near if not near.empty else same).index].idxmin()]
        rows.append(
            {
                "instance_type": s.instance_type,
                "family": family(s.instance_type),
                "SageMaker $/h": s.usd_per_hour,
                "SageMaker as of": s.as_of,
                "EC2 $/h": e.usd_per_hour,
                "EC2 as of": e.as_of,
                "paired by": "same time" if not near.empty else "EC2 price unchanged in every snapshot",
                "ratio": s.usd_per_hour / e.usd_per_hour,
            }
        )
    return pd.DataFrame(rows)


def family_ratio(name: str, path: Path | None = None) -> float:
    """The mean SageMaker/EC2 ratio of a family's AWS-owned pairs."""
    r = ratios(path)
    got = r[r.family == name]
    if got.empty:
        raise ValueError(
            f"no AWS-owned pair gives a ratio for the {name} family: families with one: {sorted(set(r.family))}"
        )
    return float(got.ratio.mean())


@dataclass(frozen=True)
class Price:
    """One hour of one instance: its US dollars, its kind ("quoted" or "estimate") and where it comes from."""

    instance_type: str
    usd_per_hour: float
    kind: str
    provenance: str
    as_of: str
    source: str

    def label(self) -> str:
        """'$25.25/h (estimate)' as the lesson's tables show it."""
        return f"${self.usd_per_hour:,.2f}/h ({self.kind})"


def ec2_price(instance_type: str, path: Path | None = None) -> Price:
    """The newest AWS-owned EC2 on-demand price of `instance_type` (without ml.), quoted from AWS's Price List."""
    t = _usable(table(path))
    ec2 = t[t["product"] == EC2]
    rows = ec2[ec2.instance_type == instance_type].sort_values("date")
    if rows.empty:
        raise ValueError(
            f"no AWS-owned EC2 on-demand price for {instance_type!r} in {Path(path or PRICE_FILE).name}: it has "
            f"{', '.join(sorted(set(ec2.instance_type)))}"
        )
    r = rows.iloc[-1]
    return Price(
        instance_type, float(r.usd_per_hour), "quoted", f"EC2 on-demand, AWS Price List of {r.as_of}", r.as_of, r.source
    )


def price(instance_type: str, path: Path | None = None) -> Price:
    """The SageMaker training price of `instance_type` (ml.*): the newest AWS-owned quoted training price, else its
    EC2 price times its family's ratio (an estimate); a type with neither is refused, naming those it has."""
    if not instance_type.startswith("ml."):
        raise ValueError(f"a SageMaker instance type starts with 'ml.' (ml.p4d.24xlarge), got {instance_type!r}")
    t = _usable(table(path))
    quoted = t[(t.instance_type == instance_type) & (t["product"] == TRAINING)].sort_values("date")
    if not quoted.empty:
        r = quoted.iloc[-1]
        return Price(
            instance_type, float(r.usd_per_hour), "quoted", f"SageMaker training price of {r.as_of}", r.as_of, r.source
        )
    fam = family(instance_type)
    known = priced(path)
    if fam is None or instance_type not in known:
        raise ValueError(
            f"no SageMaker training price for {instance_type!r}, quoted or estimated: the price file can price "
            f"{', '.join(known)}; add an AWS-owned row for it with its source"
        )
    ec2 = ec2_price(instance_type.removeprefix("ml."), path)
    ratio = family_ratio(fam, path)
    return Price(
        instance_type,
        ec2.usd_per_hour * ratio,
        "estimate",
        f"EC2 on-demand ${ec2.usd_per_hour:g}/h ({ec2.as_of}) x {ratio:.3f}, SageMaker/EC2 of AWS-owned {fam} pairs",
        ec2.as_of,
        ec2.source,
    )


def priced(path: Path | None = None) -> list[str]:
    """Every ml. type the file can price: a quoted training price, or an EC2 price in a family with a ratio."""
    t = _usable(table(path))
    fams = set(ratios(path).family)
    quoted = set(t[t["product"] == TRAINING].instance_type)
    ec2 = {f"ml.{i}" for i in t[t["product"] == EC2].instance_type if family(i) in fams}
    return sorted(quoted | ec2)


def engine_prices(instance_types: list[str], path: Path | None = None) -> dict[str, Price]:
    """For lesson 09's engine table: 'ml.<type>' (SageMaker training) and 'ec2 <type>' (EC2 on-demand) prices."""
    out = {}
    for bare in instance_types:
        out[f"ml.{bare}"] = price(f"ml.{bare}", path)
        out[f"ec2 {bare}"] = ec2_price(bare, path)
    return out


def engine_price_table(path: Path | None = None) -> dict[str, Price]:
    """engine_prices for every type the file prices both as a SageMaker training type and as an EC2 instance."""
    both = [t.removeprefix("ml.") for t in priced(path)]
    ec2 = set(_usable(table(path)).query("product == @EC2").instance_type)
    return engine_prices([b for b in both if b in ec2], path)


# --- The live price, for a learner who opts in ----------------------------------------------------------------------


class LivePriceError(RuntimeError):
    """The Price List API gave no usable price; the message says why and what to do, in one line."""


def price_list_filters(instance_type: str) -> list[dict[str, str]]:
    """The GetProducts filters for one SageMaker training type in US East (N. Virginia)."""
    return [
        {"Type": "TERM_MATCH", "Field": "instanceType", "Value": f"{instance_type}-Training"},
        {"Type": "TERM_MATCH", "Field": "location", "Value": LOCATION},
    ]


def training_types() -> set[str]:
    """The ml. types SageMaker accepts for training: TrainingInstanceType in botocore's SageMaker model."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return set(model.shape_for("TrainingInstanceType").enum)


def _usd(item: str) -> list[tuple[float, str]]:
    doc = json.loads(item)
    out = []
    for term in doc.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if usd is not None and float(usd) > 0:
                out.append((float(usd), term.get("effectiveDate", "")))
    return out


def query_price_list(instance_type: str, client: Any) -> Price:
    """Ask the Price List API (`client`: a boto3 'pricing' client) for the on-demand SageMaker training price."""
    answer = client.get_products(ServiceCode="AmazonSageMaker", Filters=price_list_filters(instance_type))
    found = [p for item in answer.get("PriceList", []) for p in _usd(item)]
    if not found:
        raise LivePriceError(
            f"the AWS Price List has no on-demand training price for {instance_type} in {LOCATION}: check the type "
            "on AWS's SageMaker pricing page; the lesson keeps the price file's figure"
        )
    if len({usd for usd, _ in found}) > 1:
        raise LivePriceError(
            f"the AWS Price List gives {len(found)} different prices for {instance_type}-Training in {LOCATION} "
            f"({', '.join(f'${u:g}' for u, _ in found)}): the lesson keeps the price file's figure"
        )
    usd, effective = found[0]
    return Price(
        instance_type,
        usd,
        "quoted",
        f"AWS Price List API, asked now (AmazonSageMaker, {instance_type}-Training, {LOCATION})",
        effective[:10] or "now",
        "https://pricing.us-east-1.amazonaws.com (GetProducts)",
    )


def opted_in(env: Mapping[str, str] | None = None) -> bool:
    """Whether the learner set the opt-in for calls to AWS (the same as lesson 07's)."""
    return (os.environ if env is None else env).get(ONLINE_FLAG) == "1"


def best_price(instance_type: str, env: Mapping[str, str] | None = None, client: Any = None) -> tuple[Price, str]:
    """The price the lesson uses, and one line that says which: the live Price List answer when the learner opted
    in (COURSE_SAGEMAKER_ONLINE=1, with AWS credentials), else the file's (quoted or estimate). Without the opt-in
    nothing is sent and `client` is not used."""
    filed = price(instance_type)  # an unknown type is refused here, before any call
    if not opted_in(env):
        return filed, f"{instance_type}: {filed.label()} from the price file ({ONLINE_FLAG} is not 1: AWS not asked)"
    if instance_type not in training_types():
        raise ValueError(f"{instance_type} is not a SageMaker training instance type (botocore's model)")
    if client is None:
        from utils import sagemaker_job as sj

        session = sj.credentials_session(PRICING_REGION, env)  # one line and no call when there are none
        client = session.client("pricing", region_name=PRICING_REGION)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        live = query_price_list(instance_type, client)
    except (ClientError, BotoCoreError) as exc:
        from utils import sagemaker_job as sj

        raise LivePriceError(sj.aws_error_line(exc, PRICING_REGION)) from None
    return live, f"{instance_type}: {live.label()} from the AWS Price List, in place of the file's {filed.label()}"
