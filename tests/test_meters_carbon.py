"""Carbon intensity read offline from codecarbon's bundled files, checked against the files read here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from edgeprof.errors import ConfigError
from edgeprof.meters.carbon import CarbonIntensity, carbon_g, carbon_intensity

DATA = Path(importlib.util.find_spec("codecarbon").submodule_search_locations[0]) / "data" / "private_infra"


def _json(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _newest(name: str) -> dict:
    """The newest year's copy of a file codecarbon ships per year (2023 from 3.3, 2016 before)."""
    return _json(str(max(DATA.glob(f"*/{name}"), key=lambda p: int(p.parent.name)).relative_to(DATA)))


def _if_shipped(name: str, case: tuple):
    """A case whose data file only newer codecarbon releases ship: skipped, with the reason, where it is absent."""
    return pytest.param(*case, marks=pytest.mark.skipif(not (DATA / name).is_file(),
                                                        reason=f"this codecarbon ships no {name}"))


@pytest.mark.parametrize("country", ["FRA", "DEU", "USA", "fra"])
def test_country_intensity_is_codecarbons_figure(country):
    expected = _json("global_energy_mix.json")[country.upper()]["carbon_intensity"]

    got = carbon_intensity(country)

    assert got.g_per_kwh == expected and "global_energy_mix.json" in got.source


@pytest.mark.skipif(importlib.util.find_spec("pycountry") is None,
                    reason="ISO alpha-2 codes are mapped through pycountry, which this environment lacks")
def test_iso2_is_mapped_to_iso3():
    assert carbon_intensity("FR") == carbon_intensity("FRA")


@pytest.mark.parametrize(
    ("country", "region", "expected"),
    [
        ("USA", "california", _newest("usa_emissions.json")["california"]["emissions"] * 0.45359237),
        ("USA", "NY", _newest("usa_emissions.json")["new york"]["emissions"] * 0.45359237),
        _if_shipped("2023/china_provincial_emissions.json", ("CHN", "beijing", lambda: _json(
            "2023/china_provincial_emissions.json")["data"]["CN-BJ"]["emission_factor"])),
        _if_shipped("nordic_emissions.json", ("SWE", "SE3", lambda: _json(
            "nordic_emissions.json")["data"]["SE3"]["emission_factor"])),
    ],
)
def test_region_intensity(country, region, expected):
    expected = expected() if callable(expected) else expected
    assert carbon_intensity(country, region=region).g_per_kwh == pytest.approx(expected, rel=1e-12)


def test_canadian_province_uses_codecarbons_fossil_share_formula():
    mix = _newest("canada_energy_mix.json")["ontario"]
    expected = 1000 * (mix["coal"] * 0.995725971 + mix["petroleum"] * 0.8166885263
                       + mix["naturalGas"] * 0.7438415916) / mix["total"]

    assert carbon_intensity("CAN", region="Ontario").g_per_kwh == pytest.approx(expected, rel=1e-12)


def test_no_country_is_the_world_average_and_says_so():
    got = carbon_intensity()

    assert got.g_per_kwh == _json("carbon_intensity_per_source.json")["world_average"]
    assert "world average" in got.source


def test_override_wins():
    got = carbon_intensity("FRA", override_g_per_kwh=123.0)

    assert got == CarbonIntensity(123.0, "--carbon-intensity (user-supplied)")


@pytest.mark.parametrize(("country", "region", "match"),
                         [("XYZ", None, "unknown country"), ("USA", "atlantis", "unknown region"),
                          ("FRA", "bretagne", "no regional data")])
def test_unknown_country_or_region_is_a_config_error(country, region, match):
    with pytest.raises(ConfigError, match=match):
        carbon_intensity(country, region=region)


def test_grams_from_joules():
    # 3.6 MJ = 1 kWh
    assert carbon_g(7.2e6, CarbonIntensity(50.0, "x")) == 100.0
