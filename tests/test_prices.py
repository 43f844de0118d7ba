"""The course's GPU prices: kinds and provenance, SageMaker's ratio to EC2 recomputed from the file, refusals, and the
live AWS Price List price (botocore's Stubber against the API's model: moto has no Price List service)."""

from __future__ import annotations

import csv
import json

import boto3
import pytest
from botocore.stub import Stubber

from utils import prices
from utils import sagemaker_job as sj


def _rows():
    with open(prices.PRICE_FILE, newline="") as f:
        return list(csv.DictReader(f))


def test_the_family_ratios_are_recomputed_from_the_file():
    rows = [r for r in _rows() if r["source_owner"] == "AWS" and r["status"] == "ok"]

    def one(instance, product, as_of):
        (r,) = [
            r
            for r in rows
            if r["instance_type"] == instance and r["product"].startswith(product) and r["as_of"] == as_of
        ]
        return float(r["usd_per_hour"])

    # P4/P5: AWS's SageMaker figures of 2025-04-11 against AWS's EC2 snapshot of 2025-04-28, before the June cut
    p4d = one("ml.p4d.24xlarge", "SageMaker", "2025-04-11") / one("p4d.24xlarge", "EC2", "2025-04-28")
    p5 = one("ml.p5.48xlarge", "SageMaker", "2025-04-11") / one("p5.48xlarge", "EC2", "2025-04-28")
    assert prices.family_ratio("P4/P5") == pytest.approx((p4d + p5) / 2)
    assert prices.family_ratio("P4/P5") == pytest.approx(1.15, abs=0.001)
    # G/P3: the EC2 prices of g5, g6 and p3 did not move, so their one snapshot pairs with the SageMaker figures
    g5 = one("ml.g5.12xlarge", "SageMaker", "2025-04-11") / one("g5.12xlarge", "EC2", "2026-07-20")
    assert g5 == pytest.approx(prices.family_ratio("G/P3"), abs=0.001)
    assert prices.family_ratio("G/P3") == pytest.approx(1.25, abs=0.001)


def test_a_pair_across_a_price_change_is_not_made(tmp_path):
    path = tmp_path / "p.csv"
    head = "instance_type,product,region,usd_per_hour,as_of,source,source_owner,status\n"
    path.write_text(
        head
        + "ml.p4d.24xlarge,SageMaker training (on-demand),us-east-1,37.688,2025-04-11,s,AWS,ok\n"
        + "p4d.24xlarge,EC2 on-demand Linux,us-east-1,32.7726,2024-01-01,s,AWS,ok\n"
        + "p4d.24xlarge,EC2 on-demand Linux,us-east-1,21.96,2025-09-01,s,AWS,ok\n"
    )
    assert prices.ratios(path).empty, "EC2's price moved and no snapshot is of the same time: no ratio"


def test_a_quoted_training_price_keeps_its_source():
    p = prices.price("ml.p3.2xlarge")
    assert (p.kind, p.usd_per_hour, p.as_of) == ("quoted", 3.825, "2022-04-14")
    assert "amazon-sagemaker-training-jobs-benchmarks" in p.source
    assert p.label() == "$3.83/h (quoted)"


def test_an_estimate_is_ec2_times_its_family_ratio_and_says_so():
    p = prices.price("ml.p4d.24xlarge")
    ec2 = prices.ec2_price("p4d.24xlarge")
    assert ec2.as_of == "2026-07-20" and ec2.usd_per_hour == pytest.approx(21.957642), "the newest AWS snapshot"
    assert p.kind == "estimate"
    assert p.usd_per_hour == pytest.approx(ec2.usd_per_hour * prices.family_ratio("P4/P5"))
    assert "x 1.150" in p.provenance and "karpenter" in p.source
    assert prices.price("ml.g6e.12xlarge").usd_per_hour == pytest.approx(10.49264 * 1.25, abs=0.01)


def test_rows_that_must_not_be_used_are_not():
    # third-party and contradicted p5 figures (80.62, 98.304, 98.32 of 2026) are in the file, with their status
    assert prices.ec2_price("p5.48xlarge").usd_per_hour == pytest.approx(55.04)


@pytest.mark.parametrize("bad", ["ml.p6-b200.48xlarge", "ml.x9.huge"])
def test_an_instance_with_no_price_is_refused_naming_those_it_has(bad):
    with pytest.raises(ValueError) as err:
        prices.price(bad)
    assert bad in str(err.value) and "ml.p4d.24xlarge" in str(err.value) and "ml.p3.2xlarge" in str(err.value)
    with pytest.raises(ValueError, match="starts with 'ml.'"):
        prices.price("p4d.24xlarge")


def test_engine_prices_give_both_products():
    both = prices.engine_prices(["p3.2xlarge"])
    assert both["ml.p3.2xlarge"].kind == "quoted" and both["ec2 p3.2xlarge"].usd_per_hour == pytest.approx(3.06)


# --- the live price ---------------------------------------------------------------------------------------------


def _answer(instance: str, usd: str) -> str:
    """One price item as the Price List API returns it: a JSON document in a string."""
    return json.dumps(
        {
            "product": {
                "productFamily": "ML Instance",
                "attributes": {
                    "instanceType": f"{instance}-Training",
                    "location": prices.LOCATION,
                    "component": "Training",
                },
                "sku": "ABCDEFGHIJKLMNOP",
            },
            "serviceCode": "AmazonSageMaker",
            "terms": {
                "OnDemand": {
                    "ABCDEFGHIJKLMNOP.JRTCKXETXF": {
                        "priceDimensions": {
                            "ABCDEFGHIJKLMNOP.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": usd},
                                "description": f"${usd} per Hour for {instance}-Training",
                            }
                        },
                        "effectiveDate": "2026-11-01T00:00:00Z",
                    }
                }
            },
        }
    )


@pytest.fixture
def pricing():
    client = boto3.client(
        "pricing", region_name=prices.PRICING_REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    calls = []
    client.meta.events.register("before-parameter-build.pricing.*", lambda **kw: calls.append(kw["model"].name))
    client.calls = calls  # every operation the client was asked to send, whatever became of it
    with Stubber(client) as stub:
        yield client, stub


def _expected(instance):
    return {"ServiceCode": "AmazonSageMaker", "Filters": prices.price_list_filters(instance)}


def test_without_the_opt_in_nothing_reaches_the_price_list(pricing, monkeypatch):
    client, stub = pricing  # no answer queued: any call would raise

    def no_credentials(*a, **k):
        raise AssertionError("credentials were looked up without the opt-in")

    monkeypatch.setattr(sj, "credentials_session", no_credentials)
    got, said = prices.best_price("ml.p4d.24xlarge", env={}, client=client)
    assert got == prices.price("ml.p4d.24xlarge") and got.kind == "estimate"
    assert "not asked" in said
    assert client.calls == []


def test_with_the_opt_in_the_quoted_price_replaces_the_estimate(pricing):
    client, stub = pricing
    stub.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": [_answer("ml.p4d.24xlarge", "25.2500000000")]},
        _expected("ml.p4d.24xlarge"),
    )
    got, said = prices.best_price("ml.p4d.24xlarge", env={prices.ONLINE_FLAG: "1"}, client=client)
    stub.assert_no_pending_responses()
    assert client.calls == ["GetProducts"]
    assert (got.kind, got.usd_per_hour) == ("quoted", 25.25)
    assert "AWS Price List" in said and "in place of" in said and "(estimate)" in said


def test_an_empty_answer_is_one_clear_line(pricing):
    client, stub = pricing
    stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []}, _expected("ml.p5.48xlarge"))
    with pytest.raises(prices.LivePriceError) as err:
        prices.best_price("ml.p5.48xlarge", env={prices.ONLINE_FLAG: "1"}, client=client)
    assert "no on-demand training price" in str(err.value) and "\n" not in str(err.value)


def test_an_api_refusal_is_one_clear_line(pricing):
    client, stub = pricing
    stub.add_client_error(
        "get_products", "AccessDeniedException", "not allowed", expected_params=_expected("ml.p3.2xlarge")
    )
    with pytest.raises(prices.LivePriceError, match="lacks a permission"):
        prices.best_price("ml.p3.2xlarge", env={prices.ONLINE_FLAG: "1"}, client=client)


def test_an_unknown_type_is_refused_before_any_call(pricing):
    client, stub = pricing
    with pytest.raises(ValueError, match="no SageMaker training price"):
        prices.best_price("ml.p9.huge", env={prices.ONLINE_FLAG: "1"}, client=client)
    assert client.calls == []


def test_no_credentials_is_one_clear_line(no_aws_credentials):
    with pytest.raises(PermissionError) as err:
        prices.best_price("ml.p3.2xlarge", env={prices.ONLINE_FLAG: "1", "AWS_EC2_METADATA_DISABLED": "true"})
    assert "no AWS credentials found" in str(err.value) and "\n" not in str(err.value)


def test_the_engine_table_prices_every_type_both_ways():
    both = prices.engine_price_table()
    assert both["ec2 p4d.24xlarge"].kind == "quoted" and both["ml.p4d.24xlarge"].kind == "estimate"
    assert "ml.p6-b200.48xlarge" not in both, "no SageMaker ratio for P6: left out, not guessed"
    assert all(k.startswith(("ml.", "ec2 ")) for k in both)
