"""Rebuild data/seattle_hourly_temperature_2010.csv from the file the vega_datasets package ships.

    pip download --no-deps vega_datasets==0.9.0 -d /some/folder
    unzip /some/folder/vega_datasets-0.9.0-py3-none-any.whl 'vega_datasets/_data/seattle-temps.csv' -d /some/folder
    python tools/make_course_dataset.py /some/folder/vega_datasets/_data/seattle-temps.csv

The source has 8,759 hourly readings; one step of the hourly grid, 2010-03-14 03:00 (the night
clocks went forward in the US), is absent. The course file puts the readings on a regular hourly
grid of 8,760 steps, fills that one step by linear interpolation between its neighbours, and marks it
in the `filled` column. See data/README.md for the provenance.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pandas as pd

SOURCE_SHA256 = "c220666521ff4bec4ffb6f0d9acfdc5c1056564b1aad6f78d3b06aa0a0c8b085"
OUT = Path(__file__).resolve().parent.parent / "data" / "seattle_hourly_temperature_2010.csv"


def main() -> None:
    """Read the shipped CSV, regularise it to an hourly grid, write the course CSV."""
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    source = Path(sys.argv[1])
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        sys.exit(f"{source} has sha256 {digest}, not the expected {SOURCE_SHA256}: is it vega_datasets 0.9.0?")
    raw = pd.read_csv(source)
    raw["timestamp"] = pd.to_datetime(raw["date"], format="%Y/%m/%d %H:%M")
    series = raw.set_index("timestamp")["temp"]
    grid = pd.date_range("2010-01-01 00:00", "2010-12-31 23:00", freq="h")
    regular = series.reindex(grid)
    filled = regular.isna()
    regular = regular.interpolate(method="linear")
    out = pd.DataFrame(
        {
            "timestamp": grid.strftime("%Y-%m-%d %H:%M"),
            "temperature_f": regular.round(1).to_numpy(),
            "filled": filled.astype(int).to_numpy(),
        }
    )
    out.to_csv(OUT, index=False)
    print(
        f"wrote {OUT.name}: {len(out)} rows, {int(filled.sum())} filled, "
        f"sha256 {hashlib.sha256(OUT.read_bytes()).hexdigest()}"
    )


if __name__ == "__main__":
    main()
