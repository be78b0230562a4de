"""The two plain-data types of the data stage and the image-shape conversion every loader shares.

A :class:`Dataset` is a whole labelled image set as one float32 array in ``(N, C, H, W)`` layout with
values in ``[0, 1]``; a :class:`ClientData` is one federated client's share of it after
:func:`edgeprof.data.partition.partition`, with labels renumbered locally. Both hold numpy arrays
only, so they can be saved, pickled or handed to torch without conversion.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeprof.errors import ConfigError

#: ITU-R BT.601 luma weights used to turn RGB into one grey channel
LUMA_WEIGHTS = np.array([0.299, 0.587, 0.114], dtype=np.float32)

#: images converted per torch call, so resizing a large set never holds two float copies of it
CHUNK_IMAGES = 4096


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled image set: ``x`` float32 ``(N, C, H, W)`` in ``[0, 1]``, ``y`` int64 global labels.

    ``groups`` (int64 ``(N,)``, optional) is a group id per sample, e.g. the Omniglot alphabet; the
    ``"group"`` partition gives each client one group. ``is_test`` (bool ``(N,)``, optional) marks the
    samples that come from the set's official test files; None when the set has no official split. Only
    the ``"paper"`` split reads it. Arrays are validated, never copied.
    """

    name: str
    x: np.ndarray = field(repr=False)
    y: np.ndarray = field(repr=False)
    num_classes: int
    groups: np.ndarray | None = field(default=None, repr=False)
    is_test: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.x.ndim != 4 or self.x.dtype != np.float32:
            raise ValueError(f"x must be float32 (N, C, H, W), got {self.x.dtype} {self.x.shape}")
        if self.y.shape != (len(self.x),) or self.y.dtype != np.int64:
            raise ValueError(f"y must be int64 of shape ({len(self.x)},), got {self.y.dtype} {self.y.shape}")
        if len(self.y) and (self.y.min() < 0 or self.y.max() >= self.num_classes):
            raise ValueError(f"labels must lie in 0..{self.num_classes - 1}")
        if self.groups is not None and (self.groups.shape != self.y.shape or self.groups.dtype != np.int64):
            raise ValueError(f"groups must be int64 of shape ({len(self.x)},), got {self.groups.shape}")
        if self.is_test is not None and (self.is_test.shape != self.y.shape or self.is_test.dtype != np.bool_):
            raise ValueError(f"is_test must be bool of shape ({len(self.x)},), got {self.is_test.dtype} "
                             f"{self.is_test.shape}")

    def __len__(self) -> int:
        return len(self.y)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image."""
        _, c, h, w = self.x.shape
        return (c, h, w)


@dataclass(frozen=True, eq=False)
class ClientData:
    """One client's train and test samples, labels local: ``k`` means global class ``classes[k]``.

    ``classes`` is sorted, so local labels follow the order of the global class ids.
    """

    client_id: int
    classes: np.ndarray = field(repr=False)
    x_train: np.ndarray = field(repr=False)
    y_train: np.ndarray = field(repr=False)
    x_test: np.ndarray = field(repr=False)
    y_test: np.ndarray = field(repr=False)

    @property
    def n_train(self) -> int:
        return len(self.y_train)

    @property
    def n_test(self) -> int:
        return len(self.y_test)

    @property
    def num_classes(self) -> int:
        """K_i, the number of classes this client holds (the width of its personalized head)."""
        return len(self.classes)

    def global_labels(self, local: np.ndarray) -> np.ndarray:
        """Map local labels (train, test or predictions) back to global class ids."""
        return self.classes[local]


def check_shape(shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """Validate a ``(C, H, W)`` target shape; ConfigError names what is wrong."""
    if len(shape) != 3 or any(int(s) != s or s < 1 for s in shape):
        raise ConfigError(f"image shape must be three positive integers (C, H, W), got {tuple(shape)}")
    channels = int(shape[0])
    if channels not in (1, 3):
        raise ConfigError(f"image shape must have 1 or 3 channels, got {channels}")
    return (channels, int(shape[1]), int(shape[2]))


def to_shape(x: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """Convert images ``(N, C, H, W)`` in ``[0, 1]`` to ``shape`` = ``(C', H', W')``, float32.

    Channels: 1 -> 3 repeats the grey channel, 3 -> 1 takes the BT.601 luminance. Size: bilinear
    ``torch.nn.functional.interpolate`` with antialiasing whenever a side shrinks. Returns ``x``
    itself when it already has the shape; otherwise works in chunks of :data:`CHUNK_IMAGES`.
    """
    channels, height, width = check_shape(shape)
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ConfigError(f"cannot convert images of shape {x.shape[1:]} to {shape}: need 1 or 3 channels")
    if x.shape[1:] == (channels, height, width) and x.dtype == np.float32:
        return x
    out = np.empty((len(x), channels, height, width), dtype=np.float32)
    for start in range(0, len(x), CHUNK_IMAGES):
        chunk = np.asarray(x[start : start + CHUNK_IMAGES], dtype=np.float32)
        out[start : start + len(chunk)] = _convert_chunk(chunk, channels, height, width)
    return out


def from_uint8(x: np.ndarray, shape: tuple[int, int, int] | None, *, invert: bool = False) -> np.ndarray:
    """Scale uint8 images ``(N, C, H, W)`` to float32 ``[0, 1]`` (``1 - v/255`` if ``invert``), then to ``shape``.

    Chunked, so peak memory is the uint8 input plus the float32 output.
    """
    target = x.shape[1:] if shape is None else check_shape(shape)
    out = np.empty((len(x), *target), dtype=np.float32)
    for start in range(0, len(x), CHUNK_IMAGES):
        chunk = x[start : start + CHUNK_IMAGES].astype(np.float32) / np.float32(255.0)
        if invert:
            chunk = np.float32(1.0) - chunk
        out[start : start + len(chunk)] = to_shape(chunk, target)
    return out


def _convert_chunk(x: np.ndarray, channels: int, height: int, width: int) -> np.ndarray:
    """Channel conversion then bilinear resize of one float32 chunk."""
    if x.shape[1] == 1 and channels == 3:
        x = np.repeat(x, 3, axis=1)
    elif x.shape[1] == 3 and channels == 1:
        x = np.tensordot(x, LUMA_WEIGHTS, axes=([1], [0]))[:, None].astype(np.float32)
    if x.shape[2:] == (height, width):
        return x
    import torch
    import torch.nn.functional as F

    shrinking = height < x.shape[2] or width < x.shape[3]
    with torch.no_grad():
        resized = F.interpolate(
            torch.from_numpy(np.ascontiguousarray(x)),
            size=(height, width),
            mode="bilinear",
            align_corners=False,
            antialias=shrinking,
        )
    return np.clip(resized.numpy(), 0.0, 1.0)
