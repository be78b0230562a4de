"""File loaders read real IDX, CIFAR-10 pickle and Omniglot PNG files written here byte by byte."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from edgeprof.data import load_dataset, partition, read_idx
from edgeprof.errors import ConfigError, DataError

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C, np.dtype(">f4"): 0x0D}


def write_idx(path: Path, array: np.ndarray, *, compress: bool = False) -> Path:
    """An IDX file as the MNIST site publishes it: magic, big-endian dims, big-endian payload."""
    big_endian = array.astype(array.dtype.newbyteorder(">"))
    header = struct.pack(">BBBB", 0, 0, IDX_CODES[big_endian.dtype], array.ndim)
    raw = header + struct.pack(f">{array.ndim}I", *array.shape) + big_endian.tobytes()
    if compress:
        raw, path = gzip.compress(raw), path.with_name(path.name + ".gz")
    path.write_bytes(raw)
    return path


def write_idx_set(folder: Path, prefix: str = "", test_stem: str = "t10k", compress: bool = False,
                  seed: int = 0, num_classes: int = 10) -> dict[str, np.ndarray]:
    """Train (5 images) and test (3 images) IDX files of random 28x28 uint8 pixels; returns what was written."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for stem, n in (("train", 5), (test_stem, 3)):
        written[f"{stem}_x"] = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        written[f"{stem}_y"] = rng.integers(0, num_classes, size=n, dtype=np.uint8)
        write_idx(folder / f"{prefix}{stem}-images-idx3-ubyte", written[f"{stem}_x"], compress=compress)
        write_idx(folder / f"{prefix}{stem}-labels-idx1-ubyte", written[f"{stem}_y"], compress=compress)
    return written


def write_png(path: Path, pixels: np.ndarray, bit_depth: int = 8) -> None:
    """A greyscale PNG (colour type 0, no interlace) built from its chunks, 8-bit or 1-bit like Omniglot's."""
    height, width = pixels.shape
    rows = np.packbits(pixels > 127, axis=1) if bit_depth == 1 else pixels.astype(np.uint8)
    scanlines = b"".join(b"\x00" + row.tobytes() for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(scanlines))
                     + chunk(b"IEND", b""))


def write_omniglot(root: Path, bit_depth: int = 8, size: int = 12) -> list[tuple[str, str, str, np.ndarray]]:
    """Alphabets in images_background and images_evaluation; returns (folder, alphabet, character, pixels) in load order."""
    rng = np.random.default_rng(1)
    layout = {
        "images_background": {"Alpha": ["character01", "character02"], "Beta": ["character01"]},
        "images_evaluation": {"Gamma": ["character01", "character02", "character03"]},
    }
    written = []
    for folder, alphabets in layout.items():
        for alphabet, characters in alphabets.items():
            for character in characters:
                for k in range(4):
                    pixels = rng.integers(0, 256, size=(size, size), dtype=np.uint8)
                    if bit_depth == 1:
                        pixels = np.where(pixels > 127, 255, 0).astype(np.uint8)
                    write_png(root / folder / alphabet / character / f"{k:02d}.png", pixels, bit_depth)
                    written.append((folder, alphabet, character, pixels))
    return written


def write_cifar(folder: Path, per_batch: int = 2, old_numpy: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The six CIFAR-10 python batches as pickled dicts; returns all pixels (N, 3072) and labels in load order.

    ``old_numpy`` names ``numpy.core.multiarray`` in the pickle, as the official (numpy 1) files do.
    """
    rng = np.random.default_rng(2)
    folder.mkdir(parents=True, exist_ok=True)
    pixels, labels = [], []
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"):
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        batch_labels = [int(v) for v in rng.integers(0, 10, size=per_batch)]
        batch = {b"batch_label": name.encode(), b"data": data, b"labels": batch_labels,
                 b"filenames": [b"x.png"] * per_batch}
        raw = pickle.dumps(batch, protocol=2)
        if old_numpy:
            raw = raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
        (folder / name).write_bytes(raw)
        pixels.append(data)
        labels.extend(batch_labels)
    return np.concatenate(pixels), np.array(labels)


# ------------------------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("dtype", [np.uint8, ">i4", ">f4"])
@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_round_trips_type_dims_and_values(tmp_path: Path, dtype: str, compress: bool) -> None:
    # Prepare
    array = np.arange(24).reshape(2, 3, 4).astype(dtype)
    path = write_idx(tmp_path / "a-idx3", array, compress=compress)
    # Execute
    loaded = read_idx(path)
    # Assert
    assert loaded.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(loaded, array)


@pytest.mark.parametrize(
    ("name", "prefix", "test_stem", "subdir", "compress"),
    [
        ("mnist", "", "t10k", "", False),
        ("mnist", "", "t10k", "MNIST/raw", True),
        ("fashion-mnist", "", "t10k", "fashion-mnist", True),
        ("emnist", "emnist-byclass-", "test", "gzip", True),
    ],
)
def test_idx_loaders_concatenate_train_and_test_exactly(
    tmp_path: Path, name: str, prefix: str, test_stem: str, subdir: str, compress: bool
) -> None:
    # Prepare
    written = write_idx_set(tmp_path / subdir, prefix, test_stem, compress, num_classes=10)
    expected_x = np.concatenate([written["train_x"], written[f"{test_stem}_x"]])
    if name == "emnist":  # EMNIST stores every image transposed; the loader must undo it
        stored = np.concatenate([written["train_x"], written[f"{test_stem}_x"]])
        expected_x = stored.transpose(0, 2, 1)
    expected_y = np.concatenate([written["train_y"], written[f"{test_stem}_y"]])
    # Execute
    dataset = load_dataset(name, data_dir=str(tmp_path))
    # Assert
    assert dataset.x.shape == (8, 1, 28, 28) and dataset.x.dtype == np.float32
    np.testing.assert_array_equal(np.rint(dataset.x[:, 0] * 255).astype(np.uint8), expected_x)
    np.testing.assert_array_equal(dataset.y, expected_y.astype(np.int64))
    assert dataset.num_classes == (62 if name == "emnist" else 10)


@pytest.mark.parametrize(("name", "prefix", "test_stem"),
                         [("mnist", "", "t10k"), ("emnist", "emnist-byclass-", "test")])
def test_idx_loaders_mark_the_official_test_samples(tmp_path: Path, name: str, prefix: str, test_stem: str) -> None:
    # Prepare: 5 train and 3 test images
    write_idx_set(tmp_path, prefix, test_stem)
    # Execute
    dataset = load_dataset(name, data_dir=tmp_path)
    # Assert
    assert dataset.is_test.dtype == np.bool_
    assert dataset.is_test.tolist() == [False] * 5 + [True] * 3


def test_emnist_transpose_puts_a_stored_column_into_a_row(tmp_path: Path) -> None:
    # Prepare: a stored image whose first column is bright must load with its first row bright
    written = write_idx_set(tmp_path, "emnist-byclass-", "test")
    image = np.zeros((28, 28), dtype=np.uint8)
    image[:, 0] = 255
    written["train_x"][0] = image
    write_idx(tmp_path / "emnist-byclass-train-images-idx3-ubyte", written["train_x"])
    # Execute
    dataset = load_dataset("emnist", data_dir=tmp_path)
    # Assert
    assert dataset.x[0, 0, 0].min() == 1.0 and dataset.x[0, 0, 1:].max() == 0.0


def _bad_magic(path: Path) -> None:
    path.write_bytes(struct.pack(">I", 1234) + path.read_bytes()[4:])


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


def _truncate_header(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:6])


def _truncate_gzip(path: Path) -> None:
    path.write_bytes(gzip.compress(path.read_bytes())[:-20])


def _trailing(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\x00")


def _remove(path: Path) -> None:
    path.unlink()


def _dims_past_int64(path: Path) -> None:
    """Four dims of 65,536 whose product, 2**64, a fixed-width integer holds as 0: a header with no payload."""
    path.write_bytes(struct.pack(">BBBB4I", 0, 0, 0x08, 4, *(65536,) * 4))


def _dims_past_memory(path: Path) -> None:
    path.write_bytes(struct.pack(">BBBB3I", 0, 0, 0x08, 3, 2**32 - 1, 2**32 - 1, 28))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_bad_magic, "is corrupt: bad magic number 1234"),
        (_truncate, "is truncated"),
        (_truncate_header, "is truncated"),
        (_truncate_gzip, "not a complete gzip stream"),
        (_trailing, "is corrupt"),
        (_remove, "not found"),
        (_dims_past_int64, "declares 18,446,744,073,709,551,616 values, more than this machine's"),
        (_dims_past_memory, "is corrupt: its header (4294967295, 4294967295, 28) declares"),
    ],
)
def test_damaged_idx_file_is_one_clear_data_error(tmp_path: Path, damage, message: str) -> None:
    # Prepare
    write_idx_set(tmp_path)
    target = tmp_path / "train-images-idx3-ubyte"
    damage(target)
    # Execute
    with pytest.raises(DataError) as caught:
        load_dataset("mnist", data_dir=tmp_path)
    # Assert
    text = str(caught.value)
    assert message in text and "MNIST" in text and "train-images-idx3-ubyte" in text and "\n" not in text


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the child's peak memory from Linux's /proc")
def test_a_gzip_stream_that_inflates_past_its_header_is_refused_without_inflating_it(tmp_path: Path) -> None:
    # Prepare: 3.5 MB of gzip (56 members of 64 MiB of zeros each) that inflate to 3.5 GiB after the header of a
    # 5-image file; read in a child process, whose peak memory is its own: VmHWM, the high-water mark of the memory
    # it was exec'd into (Linux's getrusage peak of a spawned child starts at its parent's, pytest's here)
    header = struct.pack(">BBBB3I", 0, 0, 0x08, 3, 5, 28, 28)
    member = gzip.compress(bytes(64 << 20), compresslevel=1)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(header) + member * 56)
    child = ("import sys; from pathlib import Path; from edgeprof.data import read_idx\n"
             "try:\n    read_idx(Path(sys.argv[1]), 'MNIST')\nexcept Exception as err:\n    print(err)\n"
             "print(int(Path('/proc/self/status').read_text().split('VmHWM:')[1].split('kB')[0]) * 1024)")
    # Execute
    done = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True, timeout=300)
    # Assert: refused as longer than its header says, and never held more than a small part of what it inflates to
    message, peak_bytes = done.stdout.strip().splitlines()
    assert f"MNIST file {path} is corrupt: longer than the 3936 bytes its header (5, 28, 28) needs" == message
    assert int(peak_bytes) < 1 << 30, done.stderr


@pytest.mark.parametrize(
    ("test_images", "message"),
    [(np.zeros((3, 28, 27), np.uint8), "the t10k images are 27x28, the train images 28x28"),
     (np.zeros((3, 0, 0), np.uint8), "each image at least 1x1")],
    ids=["another-size", "empty-images"])
def test_idx_images_of_no_pixels_or_another_size_than_the_train_images_are_refused(tmp_path: Path, test_images,
                                                                                  message: str) -> None:
    # Prepare
    write_idx_set(tmp_path)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", test_images)
    # Execute / Assert
    with pytest.raises(DataError, match=message):
        load_dataset("mnist", data_dir=tmp_path)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (np.zeros(4, dtype=np.uint8), "5 images but 4 labels"),
        (np.full(5, 10, dtype=np.uint8), "label 10 outside 0..9"),
        (np.zeros(5, dtype=">i4"), "labels must be uint8"),
    ],
)
def test_inconsistent_idx_pair_is_refused(tmp_path: Path, labels: np.ndarray, message: str) -> None:
    # Prepare
    write_idx_set(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", labels)
    # Execute / Assert
    with pytest.raises(DataError, match=message):
        load_dataset("mnist", data_dir=tmp_path)


# ---------------------------------------------------------------------------------------- CIFAR-10


@pytest.mark.parametrize(("subdir", "old_numpy"), [("cifar-10-batches-py", True), ("", False)])
def test_cifar10_round_trips_pixels_and_labels(tmp_path: Path, subdir: str, old_numpy: bool) -> None:
    # Prepare
    pixels, labels = write_cifar(tmp_path / subdir, old_numpy=old_numpy)
    # Execute
    dataset = load_dataset("cifar10", data_dir=tmp_path)
    # Assert
    assert dataset.x.shape == (12, 3, 32, 32) and dataset.num_classes == 10
    np.testing.assert_array_equal(np.rint(dataset.x * 255).astype(np.uint8).reshape(12, 3072), pixels)
    np.testing.assert_array_equal(dataset.y, labels)


class _Evil:
    def __reduce__(self):
        return (os.path.join, ("a", "b"))


def _nested_labels(depth: int) -> list:
    """Ten lists of ten lists ... of ten zeros, ``depth`` deep: each level one shared list, a few bytes pickled,
    10**depth labels to numpy (10**8 int64s: 800 MB; the reader must refuse it before converting it)."""
    labels: list = [0] * 10
    for _ in range(depth - 1):
        labels = [labels] * 10
    return labels


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (pickle.dumps([1, 2, 3]), 'expected a dict with keys b"data" and b"labels"'),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}), 'keys b"data" and b"labels"'),
        (pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}), "shape (N, 3072)"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}), "uint8"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}), "2 images but labels"),
        (pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": _nested_labels(8)}),
         "1 images but labels of length 10"),
        (pickle.dumps({b"data": np.zeros((10, 3072), np.uint8), b"labels": _nested_labels(8)}),
         "labels are not integers"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}), "labels outside 0..9"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0.7, 1.2]}), "labels are not integers"),
        (pickle.dumps({b"data": _Evil(), b"labels": [0]}), "forbidden global"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]})[:-30], "not a CIFAR-10"),
    ],
)
def test_cifar10_refuses_anything_but_a_python_batch(tmp_path: Path, payload: bytes, message: str) -> None:
    # Prepare
    write_cifar(tmp_path)
    (tmp_path / "data_batch_3").write_bytes(payload)
    # Execute
    with pytest.raises(DataError) as caught:
        load_dataset("cifar10", data_dir=tmp_path)
    # Assert
    assert message in str(caught.value) and "data_batch_3" in str(caught.value)


def test_cifar10_marks_the_test_batch_as_official_test(tmp_path: Path) -> None:
    # Prepare: five data batches and the test batch of 2 images each
    write_cifar(tmp_path, per_batch=2)
    # Execute
    dataset = load_dataset("cifar10", data_dir=tmp_path)
    # Assert
    assert dataset.is_test.tolist() == [False] * 10 + [True] * 2


def test_cifar10_missing_batch_is_named(tmp_path: Path) -> None:
    # Prepare
    write_cifar(tmp_path)
    (tmp_path / "test_batch").unlink()
    # Execute / Assert
    with pytest.raises(DataError, match=r"test_batch not found"):
        load_dataset("cifar10", data_dir=tmp_path)


# ---------------------------------------------------------------------------------------- Omniglot


@pytest.mark.parametrize("bit_depth", [8, 1])
def test_omniglot_round_trips_inverted_pixels_classes_and_alphabets(tmp_path: Path, bit_depth: int) -> None:
    # Prepare
    written = write_omniglot(tmp_path / "omniglot", bit_depth)
    characters = list(dict.fromkeys((f, a, c) for f, a, c, _ in written))
    alphabets = list(dict.fromkeys((f, a) for f, a, _, _ in written))
    # Execute
    dataset = load_dataset("omniglot", data_dir=tmp_path)
    # Assert
    expected = np.stack([1.0 - p / 255.0 for *_, p in written]).astype(np.float32)
    np.testing.assert_allclose(dataset.x[:, 0], expected, atol=1e-6)
    np.testing.assert_array_equal(dataset.y, [characters.index((f, a, c)) for f, a, c, _ in written])
    np.testing.assert_array_equal(dataset.groups, [alphabets.index((f, a)) for f, a, _, _ in written])
    assert dataset.num_classes == 6


def test_omniglot_resizes_to_the_backbone_shape(tmp_path: Path) -> None:
    # Prepare
    write_omniglot(tmp_path, size=35)
    # Execute
    dataset = load_dataset("omniglot", data_dir=tmp_path, shape=(1, 28, 28))
    # Assert
    assert dataset.x.shape == (24, 1, 28, 28)
    assert 0.0 <= dataset.x.min() and dataset.x.max() <= 1.0


def test_omniglot_has_no_official_test_split(tmp_path: Path) -> None:
    # Prepare
    write_omniglot(tmp_path)
    # Execute
    dataset = load_dataset("omniglot", data_dir=tmp_path)
    # Assert: images_evaluation divides the alphabets; it is not a test split
    assert dataset.is_test is None


def test_group_partition_gives_each_client_one_alphabet(tmp_path: Path) -> None:
    # Prepare
    write_omniglot(tmp_path)
    dataset = load_dataset("omniglot", data_dir=tmp_path)
    # Execute
    clients = partition(dataset, 3, "group", seed=0)
    # Assert: each client's classes are exactly the characters of one alphabet, all alphabets used once
    alphabet_of_class = {int(c): int(g) for c, g in zip(dataset.y, dataset.groups)}
    alphabets = []
    for client in clients:
        owned = {alphabet_of_class[int(c)] for c in client.classes}
        alphabets.append(owned.pop())
        assert not owned
        assert set(client.classes) == {c for c, g in alphabet_of_class.items() if g == alphabets[-1]}
        assert client.n_train + len(client.y_test) == 4 * client.num_classes
    assert sorted(alphabets) == [0, 1, 2]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda root: (root / "images_background/Alpha/character01/00.png").write_bytes(b"not a png"),
         "00.png cannot be decoded"),
        (lambda root: write_png(root / "images_background/Alpha/character01/03.png", np.zeros((5, 7), np.uint8)),
         "03.png is 7x5, the others are 12x12"),
    ],
)
def test_bad_omniglot_image_is_named(tmp_path: Path, damage, message: str) -> None:
    # Prepare
    write_omniglot(tmp_path)
    damage(tmp_path)
    # Execute / Assert
    with pytest.raises(DataError, match=message):
        load_dataset("omniglot", data_dir=tmp_path)


# ---------------------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "emnist", "cifar10", "omniglot"])
def test_file_datasets_need_an_existing_data_dir(tmp_path: Path, name: str) -> None:
    # Execute / Assert
    with pytest.raises(DataError, match=f"dataset {name} needs --data-dir"):
        load_dataset(name)
    with pytest.raises(DataError, match="is not a folder"):
        load_dataset(name, data_dir=tmp_path / "absent")


@pytest.mark.parametrize("name", ["cifar10", "omniglot", "emnist"])
def test_empty_data_dir_says_what_it_expected(tmp_path: Path, name: str) -> None:
    # Execute / Assert
    with pytest.raises(DataError, match="not found"):
        load_dataset(name, data_dir=tmp_path)


def test_unknown_dataset_is_a_config_error() -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="unknown dataset 'imagenet'"):
        load_dataset("imagenet")


@pytest.mark.parametrize(("side", "message"), [(30000, "cannot be decoded"),
                                               (2000, "is 2000x2000, more than the 1,048,576 pixels")],
                         ids=["past-pillows-bomb-limit", "under-it"])
def test_an_omniglot_png_whose_header_claims_a_huge_image_is_a_data_error(tmp_path: Path, side: int,
                                                                          message: str) -> None:
    # Prepare: a valid collection, then one PNG whose IHDR declares side x side pixels: 900 M pixels (Pillow's own
    # bomb limit is 89 M), or 4 M (under it: 16 MB as float32 each; a folder of them filled memory)
    write_omniglot(tmp_path / "omniglot")
    bomb = next((tmp_path / "omniglot").rglob("*.png"))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    bomb.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))
    # Execute
    with pytest.raises(DataError) as caught:
        load_dataset("omniglot", data_dir=tmp_path)
    # Assert: refused from its header, before any pixel is decoded (by Pillow past its limit, by edgeprof under it)
    assert bomb.name in str(caught.value) and message in str(caught.value)
