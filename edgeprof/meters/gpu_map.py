"""Which NVML GPU runs a torch device's work: ``cuda:N`` -> an NVML index, or one line saying why not.

torch counts the GPUs it sees from 0, after ``CUDA_VISIBLE_DEVICES`` has hidden and reordered them; NVML
counts every GPU of the machine in PCI bus order and ignores that variable. The two agree only by accident
(one GPU, no ``CUDA_VISIBLE_DEVICES``). :func:`map_device` finds the NVML GPU of ``cuda:N``, most reliable first:

1. the PCI address torch reports (``pci_domain_id``, ``pci_bus_id``, ``pci_device_id`` of
   ``torch.cuda.get_device_properties(N)``) against NVML's ``nvmlDeviceGetPciInfo(handle).busId``; a MIG
   instance has the address of its GPU, so it maps to that GPU;
2. the UUID torch reports (``uuid``) against ``nvmlDeviceGetUUID`` of every GPU and of its MIG devices
   (``GPU-`` / ``MIG-`` prefixes and case ignored);
3. when torch gives neither (torch not imported, an older torch): ``CUDA_VISIBLE_DEVICES`` read as CUDA reads
   it (:func:`parse_visible`, torch's rules): entry N is ``cuda:N``. A ``GPU-`` entry is a UUID prefix; a
   ``MIG-GPU-<uuid>/<gi>/<ci>`` entry names its GPU's UUID, a ``MIG-<uuid>`` entry a MIG device's. An index
   entry (or no variable at all) counts GPUs in CUDA's order, which is NVML's PCI bus order only with
   ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or when every GPU is the same model (CUDA's default puts the fastest first);
   otherwise the index is not mapped and the error names the fix.

A MIG instance is mapped to its whole GPU (:attr:`Mapped.mig`): NVML's energy and power are the GPU's, every
instance on it included. The mapping is pure functions on plain values: NVML is read by the caller
(:mod:`edgeprof.meters.nvml`), torch by :func:`torch_properties` and :func:`current_ordinal` only when torch is
already imported (never imported here), so tests pass small stand-ins.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from edgeprof.errors import ConfigError, MeterError

_PCI_RE = re.compile(r"^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)(?:\.[0-7])?$")
_DEVICE_RE = re.compile(r"^cuda(?::(\d+))?$")
#: device types that run on no GPU: their rounds leave every GPU "other"
HOST_TYPES = ("cpu", "mps", "meta")


@dataclass(frozen=True)
class NvmlGpu:
    """What NVML says about one GPU: its index, PCI address (domain, bus, device), UUID, name, MIG UUIDs."""

    index: int
    pci: tuple[int, int, int] | None = None
    uuid: str = ""
    name: str = ""
    mig_uuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mapped:
    """``cuda:<ordinal>`` runs on NVML GPU ``nvml_index``; ``how``: what the mapping rests on (one clause)."""

    ordinal: int
    nvml_index: int
    how: str
    mig: bool = False


def parse_device(device: Any, current: int = 0) -> int | None:
    """torch's GPU ordinal of ``device`` (``"cuda:1"``, ``torch.device``, an int), None for a host device
    (``"cpu"``); ``"cuda"`` without an index is ``current`` (torch's current device). ConfigError otherwise."""
    if isinstance(device, bool):
        raise ConfigError(f"gpu={device!r} is not a torch device (cuda, cuda:N, cpu)")
    if isinstance(device, int):
        text = f"cuda:{device}" if device >= 0 else str(device)
    else:
        text = str(device).strip().lower()
    if text in HOST_TYPES:
        return None
    match = _DEVICE_RE.match(text)
    if match is None:
        raise ConfigError(f"gpu={device!r} is not a torch device (cuda, cuda:N, cpu)")
    return int(match[1]) if match[1] is not None else current


def _torch_cuda() -> Any:
    """torch.cuda when torch is already imported, else None."""
    return getattr(sys.modules.get("torch"), "cuda", None)


def torch_properties(ordinal: int) -> Any:
    """torch's properties of ``cuda:<ordinal>`` when torch is imported and sees CUDA, else None (also when
    torch fails: the mapping then falls back to CUDA_VISIBLE_DEVICES)."""
    cuda = _torch_cuda()
    try:
        return cuda.get_device_properties(ordinal) if cuda is not None and cuda.is_available() else None
    except Exception:
        return None


def current_ordinal() -> int:
    """torch's current CUDA device where torch has initialised CUDA, else 0: what ``"cuda"`` means."""
    cuda = _torch_cuda()
    try:
        return int(cuda.current_device()) if cuda is not None and cuda.is_initialized() else 0
    except Exception:
        return 0


def pci_from_nvml(bus_id: Any) -> tuple[int, int, int] | None:
    """``"00000000:3B:00.0"`` (NVML's ``busId``, str or bytes) -> (0, 0x3b, 0); None when not one."""
    text = bus_id.decode(errors="replace") if isinstance(bus_id, bytes) else str(bus_id or "")
    match = _PCI_RE.match(text.strip().strip("\0").lower())
    return (int(match[1], 16), int(match[2], 16), int(match[3], 16)) if match else None


def pci_from_torch(props: Any) -> tuple[int, int, int] | None:
    """(domain, bus, device) from torch's device properties; None when torch does not report all three."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in parts):
        return None
    return parts[0], parts[1], parts[2]


def uuid_key(value: Any) -> str:
    """A UUID in one spelling: lower case, ``GPU-``/``MIG-`` prefixes dropped; 16 raw bytes formatted; '' if none."""
    raw = getattr(value, "bytes", value)
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        h = raw.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    text = (raw.decode(errors="replace") if isinstance(raw, (bytes, bytearray)) else str(value or ""))
    text = text.strip().strip("\0").lower()
    while text.startswith(("gpu-", "mig-")):
        text = text[4:]
    return text


def _pci_text(pci: tuple[int, int, int] | None) -> str:
    return "none" if pci is None else f"{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}"


def _strtoul(text: str) -> int:
    """The integer an entry starts with, as C's strtoul reads it (``"1gpu"`` -> 1); -1 when none."""
    match = re.match(r"[+-]?\d+", text)
    return int(match[0]) if match else -1


def parse_visible(value: str | None) -> list[int] | list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it (torch's ``_parse_visible_devices``): None when unset; else
    indices, or ``GPU-``/``MIG-`` entries (by the first entry's form). The list ends at the first entry that
    is not of that form (a negative index); a repeated entry hides every GPU (an empty list)."""
    if value is None:
        return None
    if value.startswith(("GPU-", "MIG-")):
        prefix, entries = value[:4], []
        for entry in value.split(","):
            if entry in entries:
                return []
            if not entry.startswith(prefix):
                break
            entries.append(entry)
        return entries
    indices: list[int] = []
    for entry in value.split(","):
        index = _strtoul(entry.strip())
        if index in indices:
            return []
        if index < 0:
            break
        indices.append(index)
    return indices


def map_device(ordinal: int, gpus: Sequence[NvmlGpu], props: Any = None, *, visible: str | None = None,
               device_order: str | None = None, library: str = "NVML",
               variable: str = "CUDA_VISIBLE_DEVICES") -> Mapped:
    """The NVML GPU of ``cuda:<ordinal>`` (see the module docstring for the order of the evidence).

    ``props``: torch's device properties of that ordinal, or None; ``visible`` and ``device_order``: the
    values of ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` (None when unset). MeterError (one line) when
    the device cannot be mapped. ``library`` and ``variable`` name the GPUs' lister and the visible-devices
    variable in what it says (AMD SMI and ``HIP_VISIBLE_DEVICES`` for :mod:`edgeprof.meters.amdsmi`).
    """
    pci = pci_from_torch(props)
    torch_uuid = uuid_key(getattr(props, "uuid", None))
    if pci is not None:
        found = [g for g in gpus if g.pci == pci]
        if len(found) != 1:
            raise _unmapped(ordinal, f"torch reports PCI {_pci_text(pci)}, where {library} has {len(found)} GPUs "
                                     f"({library} sees {', '.join(_pci_text(g.pci) for g in gpus) or 'no GPU'})",
                            library)
        mig = bool(torch_uuid) and torch_uuid in {uuid_key(u) for u in found[0].mig_uuids}
        return Mapped(ordinal, found[0].index, f"PCI {_pci_text(pci)} (torch and {library})", mig)
    if torch_uuid:
        return _by_uuid(ordinal, torch_uuid, gpus, f"UUID {torch_uuid} (torch and {library})", prefix=False,
                        library=library)
    return _by_visible(ordinal, gpus, visible, device_order, library, variable)


def _unmapped(ordinal: int, why: str, library: str = "NVML") -> MeterError:
    return MeterError(f"cannot tell which {library} GPU runs torch device cuda:{ordinal}: {why}")


def _uuid_matches(gpus: Sequence[NvmlGpu], key: str, prefix: bool) -> list[tuple[NvmlGpu, bool, str]]:
    """(GPU, whether a MIG device of it, the UUID) for every GPU or MIG device whose UUID is ``key`` (or starts
    with it)."""
    same = (lambda u: uuid_key(u).startswith(key)) if prefix else (lambda u: uuid_key(u) == key)
    out = [(g, False, g.uuid) for g in gpus if g.uuid and same(g.uuid)]
    out += [(g, True, u) for g in gpus for u in g.mig_uuids if same(u)]
    return out


def _by_uuid(ordinal: int, key: str, gpus: Sequence[NvmlGpu], how: str, *, prefix: bool,
             library: str = "NVML") -> Mapped:
    found = _uuid_matches(gpus, key, prefix)
    if len(found) != 1:
        what = (f"no {library} GPU or MIG device has" if not found
                else f"{len(found)} {library} GPUs or MIG devices match")
        raise _unmapped(ordinal, f"{how.split(' (')[0]}: {what} it", library)
    gpu, mig, _ = found[0]
    return Mapped(ordinal, gpu.index, how, mig)


def _resolve_entry(entry: str, gpus: Sequence[NvmlGpu]) -> tuple[NvmlGpu, bool, str] | None:
    """(GPU, whether a MIG device, which device) a ``GPU-``/``MIG-`` entry of CUDA_VISIBLE_DEVICES names; None
    when no device or several match (CUDA ignores such an entry, which ends the list)."""
    if entry.startswith("MIG-GPU-"):  # MIG-GPU-<gpu uuid>/<gi>/<ci>: the GPU's UUID is inside
        parent = uuid_key(entry[4:].split("/")[0])
        found = [(g, True, entry) for g, mig, _ in _uuid_matches(gpus, parent, False) if not mig]
    else:
        found = [f for f in _uuid_matches(gpus, uuid_key(entry), prefix=True)
                 if f[1] or not entry.startswith("MIG-")]
    return found[0] if len(found) == 1 else None


def _by_entries(ordinal: int, entries: list[str], gpus: Sequence[NvmlGpu], shown: str, library: str = "NVML",
                variable: str = "CUDA_VISIBLE_DEVICES") -> Mapped:
    """``cuda:<ordinal>`` from ``GPU-``/``MIG-`` entries, resolved as torch's ``_transform_uuid_to_ordinals``:
    the first entry that names no single device ends the list; a device named twice hides every GPU."""
    resolved: list[tuple[NvmlGpu, bool, str]] = []
    for entry in entries:
        hit = _resolve_entry(entry, gpus)
        if hit is None:
            break
        if any(hit[2] == r[2] for r in resolved):
            resolved = []
            break
        resolved.append(hit)
    if ordinal >= len(resolved):
        raise _unmapped(ordinal, f"{variable}={shown} names {len(resolved)} devices {library} has", library)
    gpu, mig, _ = resolved[ordinal]
    return Mapped(ordinal, gpu.index, f"{variable}={shown}, entry {ordinal} (torch gave no PCI address "
                                      "or UUID)", mig)


def _by_visible(ordinal: int, gpus: Sequence[NvmlGpu], visible: str | None, device_order: str | None,
                library: str = "NVML", variable: str = "CUDA_VISIBLE_DEVICES") -> Mapped:
    entries = parse_visible(visible)
    shown = "unset" if visible is None else repr(visible)
    if entries and isinstance(entries[0], str):
        return _by_entries(ordinal, entries, gpus, shown, library, variable)
    by_index = {g.index: g for g in gpus}
    order = list(range(len(gpus))) if entries is None else entries
    usable = _until_missing(order, by_index)
    if ordinal >= len(usable):
        raise _unmapped(ordinal, f"{variable}={shown} makes {len(usable)} of {library}'s {len(gpus)} GPUs "
                                 "visible to torch", library)
    models = {g.name for g in gpus}
    if (device_order or "").strip().upper() != "PCI_BUS_ID" and len(models) > 1:
        raise _unmapped(ordinal, "torch gives no PCI address or UUID, and CUDA numbers unlike GPUs "
                                 f"({', '.join(sorted(models))}) fastest first, not in {library}'s order; set "
                                 "CUDA_DEVICE_ORDER=PCI_BUS_ID", library)
    why = "PCI_BUS_ID order" if len(models) > 1 else "every GPU the same model"
    return Mapped(ordinal, usable[ordinal], f"{variable}={shown}, entry {ordinal} ({why}; torch gave "
                                            "no PCI address or UUID)")


def _until_missing(order: Sequence[int], by_index: dict[int, NvmlGpu]) -> list[int]:
    """The indices up to the first that names no GPU (CUDA ends the list there)."""
    out: list[int] = []
    for index in order:
        if index not in by_index:
            break
        out.append(index)
    return out
