"""Loaders for the paper's datasets from their official files: MNIST-family IDX, CIFAR-10 batches, Omniglot PNGs.

Nothing is downloaded: the user points ``data_dir`` at files fetched once (``scripts/`` has how). Each
loader concatenates the official train and test parts into one :class:`Dataset`, because the default
partitioner makes its own per-client train/test split (paper, Appendix A.2); the MNIST-family and
CIFAR-10 loaders mark the official test samples in ``Dataset.is_test`` for the ``"paper"`` split, which
keeps them apart. Every problem with a file becomes a one-line :class:`DataError` that names the file
and what is wrong with it.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import pickle
import struct
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeprof.data.base import Dataset, from_uint8
from edgeprof.errors import DataError

#: IDX type codes (third header byte) and the big-endian numpy dtype they name
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
GZIP_MAGIC = b"\x1f\x8b"
#: bytes a loaded value takes at the load's peak: the payload read and its concatenated copy (uint8), float32
#: (:func:`edgeprof.data.base.from_uint8`) and the clients' float32 copies after partitioning (about 3 GB for the
#: 0.5 GB of values of a 640,000-image file, measured)
LOADED_BYTES_PER_VALUE = 10


@dataclass(frozen=True)
class IdxSet:
    """Where one MNIST-family set keeps its four IDX files and how to read them."""

    title: str
    prefix: str
    num_classes: int
    subdirs: tuple[str, ...]
    transposed: bool = False


#: the IDX datasets; EMNIST is the "byclass" split (62 classes: digits, upper and lower case letters)
IDX_SETS = {
    "mnist": IdxSet("MNIST", "", 10, ("mnist", "MNIST/raw")),
    "fashion-mnist": IdxSet("Fashion-MNIST", "", 10, ("fashion-mnist", "FashionMNIST/raw")),
    "emnist": IdxSet("EMNIST", "emnist-byclass-", 62, ("emnist", "gzip", "EMNIST/raw"), transposed=True),
}

CIFAR_SUBDIR = "cifar-10-batches-py"
CIFAR_BATCHES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch")
CIFAR_PIXELS = 3 * 32 * 32
#: the only globals a CIFAR-10 batch pickle may name: numpy array reconstruction and bytes decoding
CIFAR_PICKLE_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)

OMNIGLOT_FOLDERS = ("images_background", "images_evaluation")
OMNIGLOT_SUBDIRS = ("", "omniglot", "omniglot-py")
#: the most pixels an Omniglot image may have: the official drawings are 105x105; 1024x1024 leaves room for rescans
OMNIGLOT_MAX_PIXELS = 1024 * 1024


# ---------------------------------------------------------------------------------------- IDX


def read_idx(path: Path, title: str = "IDX") -> np.ndarray:
    """Parse one IDX file (plain or gzip, detected by content) into an array of its declared type and dims.

    The header is ``0x00 0x00 <type code> <ndim>`` followed by ``ndim`` big-endian uint32 sizes; the
    payload must be exactly as long as they say. The file is read as a stream against its header: a payload the
    header declares too large for this machine's memory is refused before it is read, and a gzip stream is never
    decompressed past the payload (a small file that inflates without end is refused as it overruns). ``title``
    names the dataset in error messages.
    """
    try:
        with _open_maybe_gzip(path) as stream:
            return _read_idx_stream(stream, path, title)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{title} file {path} is corrupt: not a complete gzip stream ({err})") from err
    except OSError as err:
        raise DataError(f"{title} file {path} cannot be read: {err.strerror or err}") from err


def _read_idx_stream(stream, path: Path, title: str) -> np.ndarray:
    """The array of one IDX stream: its header, then exactly the payload the header declares, then its end."""
    head = stream.read(4)
    if len(head) < 4:
        raise DataError(f"{title} file {path} is truncated: {len(head)} bytes, shorter than an IDX header")
    magic = struct.unpack(">I", head)[0]
    code, ndim = head[2], head[3]
    if head[:2] != b"\x00\x00" or code not in IDX_DTYPES or ndim == 0:
        raise DataError(f"{title} file {path} is corrupt: bad magic number {magic} (0x{magic:08x})")
    sizes = stream.read(4 * ndim)
    if len(sizes) < 4 * ndim:
        raise DataError(f"{title} file {path} is truncated: header declares {ndim} dims but the file ends")
    dims = struct.unpack(f">{ndim}I", sizes)
    dtype = np.dtype(IDX_DTYPES[code])
    count = math.prod(dims)  # Python's integers: a header's product never wraps around
    header_bytes, memory = 4 + 4 * ndim, _memory_bytes()
    expected = header_bytes + count * dtype.itemsize
    if memory is not None and count * LOADED_BYTES_PER_VALUE > memory:
        raise DataError(f"{title} file {path} is corrupt: its header {dims} declares {count:,} values, more than "
                        f"this machine's {memory / 2**30:.1f} GiB of memory holds once loaded "
                        f"({LOADED_BYTES_PER_VALUE} bytes a value)")
    data = np.empty(count * dtype.itemsize, dtype=np.uint8)
    got = _read_into(stream, memoryview(data))
    if got < len(data):
        raise DataError(f"{title} file {path} is truncated: {header_bytes + got} bytes but its header {dims} needs "
                        f"{expected}")
    if stream.read(1):
        raise DataError(f"{title} file {path} is corrupt: longer than the {expected} bytes its header {dims} needs")
    return data.view(dtype).reshape(dims)


def _read_into(stream, buffer: memoryview) -> int:
    """Fill ``buffer`` from ``stream`` until it is full or the stream ends; the bytes read."""
    done = 0
    while done < len(buffer):
        got = stream.readinto(buffer[done:])
        if not got:
            break
        done += got
    return done


@contextlib.contextmanager
def _open_maybe_gzip(path: Path):
    """The file as a binary stream, decompressed as it is read if it starts with the gzip magic."""
    with path.open("rb") as raw:
        magic = raw.read(2)
        raw.seek(0)
        if magic != GZIP_MAGIC:
            yield raw
            return
        with gzip.GzipFile(fileobj=raw) as unzipped:
            yield unzipped


def _memory_bytes() -> int | None:
    """This machine's physical memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def load_idx_dataset(name: str, data_dir: Path, shape: tuple[int, int, int] | None = None) -> Dataset:
    """Load ``mnist``, ``fashion-mnist`` or ``emnist`` (byclass) with train and test concatenated.

    Files are ``[prefix]{train,t10k|test}-{images-idx3,labels-idx1}-ubyte[.gz]`` in ``data_dir`` or
    one of the set's :class:`IdxSet` subfolders. EMNIST images are stored transposed and are
    transposed back here. Pixels are scaled to ``[0, 1]``; ``is_test`` marks the ``t10k``/``test`` samples.
    """
    spec = IDX_SETS[name]
    images, labels = [], []
    for split in (("train",), ("t10k", "test")):
        x = read_idx(_find_idx(spec, data_dir, split, "images-idx3-ubyte"), spec.title)
        y = read_idx(_find_idx(spec, data_dir, split, "labels-idx1-ubyte"), spec.title)
        _check_idx_pair(spec, data_dir, split, x, y)
        if images and x.shape[1:] != images[0].shape[1:]:
            raise DataError(f"{spec.title} files in {data_dir}: the {split[0]} images are {x.shape[2]}x{x.shape[1]}, "
                            f"the train images {images[0].shape[2]}x{images[0].shape[1]}")
        images.append(x)
        labels.append(y)
    x_u8 = np.concatenate(images)[:, None]
    if spec.transposed:
        x_u8 = x_u8.transpose(0, 1, 3, 2)
    y_all = np.concatenate(labels).astype(np.int64)
    is_test = np.repeat(np.array([False, True]), [len(y) for y in labels])
    return Dataset(name=name, x=from_uint8(x_u8, shape), y=y_all, num_classes=spec.num_classes, is_test=is_test)


def _find_idx(spec: IdxSet, data_dir: Path, stems: tuple[str, ...], kind: str) -> Path:
    """First existing ``<prefix><stem>-<kind>[.gz]`` in ``data_dir`` or the set's subfolders."""
    folders = [data_dir, *(data_dir / sub for sub in spec.subdirs)]
    names = [f"{spec.prefix}{stem}-{kind}{ext}" for stem in stems for ext in ("", ".gz")]
    for folder in folders:
        for name in names:
            if (folder / name).is_file():
                return folder / name
    raise DataError(
        f"{spec.title} file {names[0]}(.gz) not found in {data_dir} "
        f"(also looked in {', '.join(spec.subdirs)})"
    )


def _check_idx_pair(spec: IdxSet, data_dir: Path, split: tuple[str, ...], x: np.ndarray, y: np.ndarray) -> None:
    """The images are a uint8 (N, H, W) stack, the labels uint8 (N,) in range."""
    where = f"{spec.title} {split[0]} files in {data_dir}"
    if x.ndim != 3 or x.dtype != np.uint8 or 0 in x.shape[1:]:
        raise DataError(f"{where}: images must be uint8 of 3 dims, each image at least 1x1, got {x.dtype} {x.shape}")
    if y.ndim != 1 or y.dtype != np.uint8:
        raise DataError(f"{where}: labels must be uint8 of 1 dim, got {y.dtype} {y.shape}")
    if len(x) != len(y):
        raise DataError(f"{where}: {len(x)} images but {len(y)} labels")
    if len(y) and int(y.max()) >= spec.num_classes:
        raise DataError(f"{where}: label {int(y.max())} outside 0..{spec.num_classes - 1}")


# ---------------------------------------------------------------------------------------- CIFAR-10


class _CifarUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global except numpy array reconstruction."""

    def find_class(self, module: str, name: str):
        if (module, name) not in CIFAR_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"forbidden global {module}.{name}")
        return super().find_class(module, name)


def load_cifar10(data_dir: Path, shape: tuple[int, int, int] | None = None) -> Dataset:
    """Load the CIFAR-10 python batches (``data_batch_1..5`` then ``test_batch``), native ``(3, 32, 32)``.

    ``is_test`` marks the samples of ``test_batch``.

    The batches are read from ``data_dir/cifar-10-batches-py`` or ``data_dir``. They are pickles
    (``encoding="bytes"``), and unpickling an untrusted file can run arbitrary code: only load the
    official archive. As a safeguard the unpickler accepts no global but numpy array reconstruction,
    and anything that is not a dict with ``b"data"`` (N x 3072 uint8) and ``b"labels"`` (N ints 0..9)
    is refused with a DataError.
    """
    folder = _cifar_folder(data_dir)
    images, labels = [], []
    for batch in CIFAR_BATCHES:
        x, y = _read_cifar_batch(folder / batch)
        images.append(x)
        labels.append(y)
    x_u8 = np.concatenate(images).reshape(-1, 3, 32, 32)
    is_test = np.repeat([batch == "test_batch" for batch in CIFAR_BATCHES], [len(y) for y in labels])
    return Dataset(name="cifar10", x=from_uint8(x_u8, shape), y=np.concatenate(labels), num_classes=10,
                   is_test=is_test)


def _cifar_folder(data_dir: Path) -> Path:
    for folder in (data_dir / CIFAR_SUBDIR, data_dir):
        if (folder / CIFAR_BATCHES[0]).is_file():
            return folder
    raise DataError(
        f"CIFAR-10 batches not found: expected {CIFAR_SUBDIR}/data_batch_1..5 and test_batch in {data_dir}"
    )


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch's uint8 ``(N, 3072)`` pixels and int64 labels, validated."""
    if not path.is_file():
        raise DataError(f"CIFAR-10 file {path} not found")
    try:
        with path.open("rb") as handle:
            batch = _CifarUnpickler(handle, encoding="bytes").load()
    except OSError as err:
        raise DataError(f"CIFAR-10 file {path} cannot be read: {err.strerror or err}") from err
    except Exception as err:  # a corrupt pickle can raise almost any exception type
        raise DataError(f"CIFAR-10 file {path} is not a CIFAR-10 python batch: {err}") from err
    return _check_cifar_batch(path, batch)


def _check_cifar_batch(path: Path, batch: object) -> tuple[np.ndarray, np.ndarray]:
    bad = f"CIFAR-10 file {path} is not a CIFAR-10 python batch"
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise DataError(f'{bad}: expected a dict with keys b"data" and b"labels"')
    data = batch[b"data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != CIFAR_PIXELS:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{bad}: data must be a uint8 array of shape (N, {CIFAR_PIXELS}), got {got}")
    listed = batch[b"labels"]
    if isinstance(listed, (list, tuple)) and (len(listed) != len(data) or not all(
            type(v) is int for v in listed)):  # checked before numpy sees it: shared nested lists cost nothing here
        raise DataError(f"{bad}: {len(data)} images but labels of length {len(listed)}" if len(listed) != len(data)
                        else f"{bad}: labels are not integers")
    try:
        raw = np.asarray(listed)
        if raw.dtype.kind not in "iu" and not (raw.size == 0 and raw.dtype.kind == "f"):
            raise TypeError(f"dtype {raw.dtype}")  # floats would be truncated silently
        labels = raw.astype(np.int64)
    except (TypeError, ValueError) as err:
        raise DataError(f"{bad}: labels are not integers ({err})") from err
    if labels.shape != (len(data),):
        raise DataError(f"{bad}: {len(data)} images but labels of shape {labels.shape}")
    if len(labels) and (labels.min() < 0 or labels.max() > 9):
        raise DataError(f"{bad}: labels outside 0..9")
    return data, labels


# ---------------------------------------------------------------------------------------- Omniglot


def load_omniglot(data_dir: Path, shape: tuple[int, int, int] | None = None) -> Dataset:
    """Load Omniglot from the official ``images_background`` (and, if present, ``images_evaluation``) folders.

    Layout: ``<folder>/<alphabet>/<character>/*.png``, looked for in ``data_dir``, ``data_dir/omniglot``
    or torchvision's ``data_dir/omniglot-py``. Every character is a class and every alphabet a group
    (``Dataset.groups``), both numbered in sorted folder order, background before evaluation. Images
    are inverted so strokes are 1 and background 0; native size is 105x105. ``is_test`` stays None: background
    and evaluation divide the alphabets, they are not a test split. Needs Pillow.
    """
    folders = _omniglot_folders(data_dir)
    paths, labels, groups = _omniglot_index(folders)
    if not paths:
        raise DataError(f"Omniglot folders {', '.join(map(str, folders))} hold no <alphabet>/<character>/*.png images")
    x_u8 = _decode_pngs(paths)[:, None]
    return Dataset(
        name="omniglot",
        x=from_uint8(x_u8, shape, invert=True),
        y=np.asarray(labels, dtype=np.int64),
        num_classes=int(labels[-1]) + 1,
        groups=np.asarray(groups, dtype=np.int64),
    )


def _omniglot_folders(data_dir: Path) -> list[Path]:
    for sub in OMNIGLOT_SUBDIRS:
        found = [data_dir / sub / name for name in OMNIGLOT_FOLDERS if (data_dir / sub / name).is_dir()]
        if found:
            return found
    raise DataError(
        f"Omniglot folder images_background/<alphabet>/<character>/*.png not found in {data_dir} "
        "(unzip the official images_background.zip there)"
    )


def _omniglot_index(folders: list[Path]) -> tuple[list[Path], list[int], list[int]]:
    """Every PNG with its class (character) and group (alphabet); empty folders get no id."""
    paths: list[Path] = []
    labels: list[int] = []
    groups: list[int] = []
    num_classes = num_groups = 0
    for folder in folders:
        for alphabet in _subfolders(folder):
            found_in_alphabet = False
            for character in _subfolders(alphabet):
                pngs = sorted(character.glob("*.png"))
                if not pngs:
                    continue
                paths.extend(pngs)
                labels.extend([num_classes] * len(pngs))
                groups.extend([num_groups] * len(pngs))
                num_classes += 1
                found_in_alphabet = True
            num_groups += found_in_alphabet
    return paths, labels, groups


def _subfolders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _decode_pngs(paths: list[Path]) -> np.ndarray:
    """Decode grey images of one common size into a uint8 ``(N, H, W)`` stack."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as err:
        raise DataError("reading Omniglot PNGs needs Pillow: pip install pillow") from err
    stack: np.ndarray | None = None
    for i, path in enumerate(paths):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)  # a header this big is refused
                with Image.open(path) as image:
                    if image.width * image.height > OMNIGLOT_MAX_PIXELS:  # read from the header, before decoding
                        raise DataError(f"Omniglot image {path} is {image.width}x{image.height}, more than the "
                                        f"{OMNIGLOT_MAX_PIXELS:,} pixels an Omniglot drawing may have (105x105)")
                    pixels = np.asarray(image.convert("L"), dtype=np.uint8)
        except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError,
                Image.DecompressionBombWarning) as err:
            raise DataError(f"Omniglot image {path} cannot be decoded: {err}") from err
        if stack is None:
            stack = np.empty((len(paths), *pixels.shape), dtype=np.uint8)
        elif pixels.shape != stack.shape[1:]:
            raise DataError(f"Omniglot image {path} is {pixels.shape[1]}x{pixels.shape[0]}, the others are "
                            f"{stack.shape[2]}x{stack.shape[1]}")
        stack[i] = pixels
    assert stack is not None
    return stack
