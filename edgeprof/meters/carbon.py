"""Carbon intensity (g CO2e per kWh) read offline from the data files that ship with codecarbon.

Nothing here starts codecarbon's tracker or touches the network: the JSON files under
``site-packages/codecarbon/data/private_infra`` are located without importing codecarbon and read
directly, with the same conversions codecarbon applies:
  * country (ISO 3166 alpha-3, or alpha-2 mapped through pycountry when installed):
    ``global_energy_mix.json`` -> ``carbon_intensity`` (g/kWh);
  * ``region`` for USA (state name or 2-letter code): ``<year>/usa_emissions.json`` (lbs/MWh x 0.45359237);
    CAN (province): ``<year>/canada_energy_mix.json``, codecarbon's fossil-share formula (the newest year the
    installed codecarbon ships: 2023 from codecarbon 3.3, 2016 before);
    CHN (province): ``2023/china_provincial_emissions.json``; SWE/NOR/FIN (bidding zone SE1.., NO1.., FI):
    ``nordic_emissions.json``;
  * no country: the world average of ``carbon_intensity_per_source.json``, and the source says so; a
    valid ISO code without data gets the same fallback.
``override_g_per_kwh`` (``--carbon-intensity``) wins over everything.

codecarbon is an ordinary dependency, but a run never fails for want of it: when its data files cannot
be found, :func:`carbon_intensity` raises :class:`CarbonDataMissing` and :func:`carbon_or_note` turns
that into no intensity (empty carbon columns) and one note.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from edgeprof.errors import ConfigError

#: 1 lb/MWh in g/kWh
G_PER_KWH_PER_LB_PER_MWH = 0.45359237
#: codecarbon's kg/kWh per fossil source for the Canadian mixes (energy-usage project figures)
_CANADA_SOURCE_KG_PER_KWH = {"coal": 0.995725971, "petroleum": 0.8166885263, "naturalGas": 0.7438415916}
#: ISO3 -> prefix of its bidding zones in nordic_emissions.json
_NORDIC = {"SWE": "SE", "NOR": "NO", "FIN": "FI"}
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class CarbonIntensity:
    """Grams CO2e per kWh and where the figure comes from."""

    g_per_kwh: float
    source: str


def carbon_g(energy_j: float, intensity: CarbonIntensity) -> float:
    """Grams CO2e of ``energy_j`` joules: ``energy_j / 3.6e6 kWh * g_per_kwh``."""
    return energy_j / J_PER_KWH * intensity.g_per_kwh


class CarbonDataMissing(ConfigError):
    """codecarbon (and so its data files) cannot be found; a run goes on without carbon figures."""


def codecarbon_data_dir() -> Path:
    """``codecarbon/data`` of the installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec("codecarbon")
    except (ImportError, ValueError):  # a broken or blocked installation
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise CarbonDataMissing("codecarbon is not installed: pip install codecarbon, or pass --carbon-intensity")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _load(relative: str) -> dict:
    path = codecarbon_data_dir() / "private_infra" / relative
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CarbonDataMissing(f"cannot read codecarbon data file {path}: {err}") from err


def newest_year(name: str) -> str:
    """``<year>/<name>`` of the newest year the installed codecarbon ships (3.3 ships 2023's US figures, releases
    before it 2016's), or ``2023/<name>`` when none does, so that reading it says which file is missing."""
    years = sorted((p.parent.name for p in (codecarbon_data_dir() / "private_infra").glob(f"*/{name}")
                    if p.parent.name.isdigit()), key=int)
    return f"{years[-1] if years else '2023'}/{name}"


def carbon_or_note(country: str | None = None, *, region: str | None = None,
                   override_g_per_kwh: float | None = None) -> tuple[CarbonIntensity | None, str | None]:
    """:func:`carbon_intensity`, or ``(None, note)`` when codecarbon's data is missing.

    A bad country or region is still a :class:`ConfigError`: that is the user's input, not the machine's.
    """
    try:
        return carbon_intensity(country, region=region, override_g_per_kwh=override_g_per_kwh), None
    except CarbonDataMissing as err:
        return None, f"no carbon figures ({err}); the carbon_g column stays empty"


def _iso3(country: str, mix: dict) -> str | None:
    """Upper-cased alpha-3 code, mapping alpha-2 through pycountry; None when not an ISO code at all."""
    code = country.strip().upper()
    if code in mix:
        return code
    try:
        import pycountry
    except ImportError:
        return None
    found = pycountry.countries.get(alpha_3=code) if len(code) == 3 else (
        pycountry.countries.get(alpha_2=code) if len(code) == 2 else None)
    return found.alpha_3 if found else None


def carbon_intensity(
    country: str | None = None,
    *,
    region: str | None = None,
    override_g_per_kwh: float | None = None,
) -> CarbonIntensity:
    """Carbon intensity for a country (and optional region), or the override, or the world average."""
    if override_g_per_kwh is not None:
        if override_g_per_kwh < 0:
            raise ConfigError(f"carbon intensity must be >= 0 g/kWh, got {override_g_per_kwh}")
        return CarbonIntensity(float(override_g_per_kwh), "--carbon-intensity (user-supplied)")
    per_source = _load("carbon_intensity_per_source.json")
    world = CarbonIntensity(float(per_source["world_average"]),
                            f"world average from codecarbon carbon_intensity_per_source.json ({per_source.get('world_average_source', '')})")
    if country is None:
        if region is not None:
            raise ConfigError("--region needs --country")
        return CarbonIntensity(world.g_per_kwh, "no country given: " + world.source)
    mix = _load("global_energy_mix.json")
    code = _iso3(country, mix)
    if code is None:
        raise ConfigError(f"unknown country {country!r}: use an ISO 3166 code such as FRA, DEU, USA "
                          f"(codecarbon has data for {len(mix)} countries: {', '.join(sorted(mix)[:12])}, ...)")
    if region is not None:
        return _region_intensity(code, region)
    if code not in mix:
        return CarbonIntensity(world.g_per_kwh, f"codecarbon has no data for {code}: " + world.source)
    entry = mix[code]
    return CarbonIntensity(float(entry["carbon_intensity"]),
                           f"codecarbon global_energy_mix.json: {entry.get('country_name', code)} ({code}), "
                           f"year {entry.get('year', '?')}")


def _region_intensity(code: str, region: str) -> CarbonIntensity:
    key = " ".join(region.lower().split())
    if code == "USA":
        relative = newest_year("usa_emissions.json")
        data = _load(relative)
        states = {k: v for k, v in data.items() if not k.startswith("_")}
        by_code = {v.get("regionCode", "").lower(): k for k, v in states.items()}
        name = key if key in states else by_code.get(key)
        if name is not None:
            lbs = float(states[name]["emissions"])
            return CarbonIntensity(lbs * G_PER_KWH_PER_LB_PER_MWH,
                                   f"codecarbon {relative}: {name} ({lbs} lbs/MWh, EPA eGRID)")
        choices = sorted(states)
    elif code == "CAN":
        relative = newest_year("canada_energy_mix.json")
        data = _load(relative)
        if key in data:
            mix = data[key]
            kg = sum(mix.get(s, 0.0) / mix["total"] * f for s, f in _CANADA_SOURCE_KG_PER_KWH.items())
            return CarbonIntensity(kg * 1000, f"codecarbon {relative}: {key} (fossil share x source factors)")
        choices = sorted(data)
    elif code == "CHN":
        data = _load("2023/china_provincial_emissions.json")["data"]
        for province, entry in data.items():
            if key in entry.get("names", []) or key == province.lower():
                return CarbonIntensity(float(entry["emission_factor"]),
                                       f"codecarbon 2023/china_provincial_emissions.json: {entry.get('description', province)}")
        choices = sorted(data)
    elif code in _NORDIC:
        data = _load("nordic_emissions.json")["data"]
        zone = region.strip().upper()
        if zone in data and zone.startswith(_NORDIC[code]):
            return CarbonIntensity(float(data[zone]["emission_factor"]),
                                   f"codecarbon nordic_emissions.json: {data[zone].get('description', zone)}")
        choices = sorted(z for z in data if z.startswith(_NORDIC[code]))
    else:
        raise ConfigError(f"codecarbon has no regional data for {code}; omit --region (USA, CAN, CHN, SWE, NOR, FIN have regions)")
    raise ConfigError(f"unknown region {region!r} for {code}: one of {', '.join(choices)}")
