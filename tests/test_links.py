"""The network-rate rule: the baseline where AWS gives one, and one data file that agrees with the others."""

import pandas as pd
import pytest

from utils import links, paths


def test_burst_types_use_their_baseline():
    rate = links.decision_rate("p3.2xlarge")
    assert (rate.gbps, rate.kind, rate.published_gbps) == (2.5, "baseline", 10.0)
    assert "baseline" in rate.label and "10" in rate.label
    assert links.decision_rate("ml.g5.xlarge").gbps == 2.5


def test_fixed_rates_are_sustained_and_have_no_burst():
    rate = links.decision_rate("ml.p4d.24xlarge")
    assert (rate.gbps, rate.kind) == (400.0, "sustained")
    assert links.burst_rate("p4d.24xlarge") is None


def test_burst_row_is_labelled():
    rows = links.rates_for(["p3.2xlarge", "p3.16xlarge"])
    assert [(r.instance, r.kind) for r in rows] == [
        ("p3.2xlarge", "baseline"),
        ("p3.2xlarge", "burst"),
        ("p3.16xlarge", "sustained"),
    ]
    assert "burst" in rows[1].label
    assert rows[0].bytes_per_s == pytest.approx(2.5e9 / 8)


def test_an_up_to_figure_without_baseline_is_labelled_burst(tmp_path, monkeypatch):
    csv = tmp_path / "rates.csv"
    csv.write_text("instance,published_gbps,published_as,baseline_gbps,source,read_on\nx.large,5,up to,,s,2026\n")
    monkeypatch.setattr(links, "RATES_CSV", csv)
    links._table.cache_clear()
    try:
        rate = links.decision_rate("x.large")
        assert (rate.gbps, rate.kind) == (5.0, "burst") and "burst" in rate.label
    finally:
        links._table.cache_clear()


def test_unknown_instance_says_what_to_do():
    with pytest.raises(KeyError, match="add a row"):
        links.decision_rate("z9.nano")


def test_every_published_figure_matches_the_other_data_files():
    rates = links.rates()
    network = pd.read_csv(paths.DATA / "network_links.csv")
    instances = pd.read_csv(paths.DATA / "gpu_instances.csv")
    pairs = [(r.instance, r.network_gbps) for r in network.itertuples()]
    pairs += [(r.instance_type.removeprefix("ml."), r.network_gbps) for r in instances.itertuples()]
    for instance, gbps in pairs:
        assert instance in rates.index, f"{instance} has no row in network_rates.csv"
        assert rates.loc[instance, "published_gbps"] == gbps, instance
    assert rates.source.str.len().min() > 20
