"""The paper's Table 4 backbones: shapes, parameters, determinism and the errors they raise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgeprof.errors import ConfigError, ModelError
from edgeprof.nn.backbones import (
    BACKBONES,
    build_backbone,
    default_input_shape,
    get_params,
    param_count,
    set_params,
)

# M from Table 5, theta's size counted by hand from Table 4 (weights + biases per layer)
EXPECTED = {
    "mlp": ((1, 28, 28), 200, 784 * 200 + 200),
    "cnn-cifar": ((3, 32, 32), 192, 3 * 64 * 25 + 64 + 64 * 64 * 25 + 64 + 4096 * 384 + 384 + 384 * 192 + 192),
    "cnn-omniglot": ((1, 28, 28), 64, 64 * 9 + 64 + 3 * (64 * 64 * 9 + 64)),
}


@pytest.mark.parametrize("name", BACKBONES)
def test_backbone_maps_images_to_paper_feature_dim(name):
    # Prepare
    shape, feature_dim, n_params = EXPECTED[name]
    module = build_backbone(name)
    # Execute
    with torch.no_grad():
        features = module(torch.rand(3, *shape))
    # Assert
    assert default_input_shape(name) == shape
    assert (module.backbone_name, module.input_shape, module.feature_dim) == (name, shape, feature_dim)
    assert features.shape == (3, feature_dim)
    assert param_count(module) == n_params


@pytest.mark.parametrize("name", BACKBONES)
def test_backbone_has_no_batch_norm_or_dropout(name):
    # Execute
    kinds = {type(layer) for layer in build_backbone(name).modules()}
    # Assert
    assert not any(issubclass(kind, (torch.nn.modules.batchnorm._NormBase, torch.nn.Dropout)) for kind in kinds)


@pytest.mark.parametrize("name", BACKBONES)
def test_init_is_deterministic_and_leaves_global_rng_alone(name):
    # Prepare
    state_before = torch.random.get_rng_state()
    # Execute
    first, again, other = (get_params(build_backbone(name, seed=s)) for s in (3, 3, 4))
    # Assert
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], other[0])
    assert torch.equal(torch.random.get_rng_state(), state_before)


def test_custom_input_shape_changes_flatten_width():
    # Execute
    module = build_backbone("cnn-omniglot", input_shape=(3, 32, 32))
    # Assert: 32 -> 16 -> 8 -> 4 -> 2, so 64 * 2 * 2 features and a 3-channel first conv
    assert module.feature_dim == 256
    assert module(torch.rand(2, 3, 32, 32)).shape == (2, 256)


def test_get_set_params_round_trip_changes_the_forward():
    # Prepare
    module, source = build_backbone("cnn-omniglot", seed=0), build_backbone("cnn-omniglot", seed=1)
    x = torch.rand(4, 1, 28, 28)
    # Execute
    set_params(module, get_params(source))
    # Assert
    assert all(np.array_equal(a, b) for a, b in zip(get_params(module), get_params(source)))
    with torch.no_grad():
        assert torch.equal(module(x), source(x))


def test_get_params_returns_float32_copies():
    # Prepare
    module = build_backbone("mlp")
    params = get_params(module)
    # Execute
    params[0][:] = 0.0
    # Assert
    assert all(p.dtype == np.float32 for p in params)
    assert float(np.abs(get_params(module)[0]).sum()) > 0.0


@pytest.mark.parametrize(
    "mutate",
    [lambda p: p[:-1], lambda p: [*p[:-1], p[-1][:-1]], lambda p: [p[1], p[0]]],
    ids=["missing-array", "short-bias", "swapped"],
)
def test_set_params_rejects_wrong_count_or_shape_without_changing_anything(mutate):
    # Prepare
    module = build_backbone("mlp")
    before = get_params(module)
    wrong = mutate(get_params(build_backbone("mlp", seed=9)))
    # Execute
    with pytest.raises(ModelError):
        set_params(module, wrong)
    # Assert
    assert all(np.array_equal(a, b) for a, b in zip(get_params(module), before))


@pytest.mark.parametrize(
    "name, input_shape",
    [("vgg", None), ("MLP", None), ("mlp", (28, 28)), ("mlp", (1, 0, 28)), ("cnn-omniglot", (1, 8, 8))],
)
def test_unknown_backbone_or_bad_shape_is_a_config_error(name, input_shape):
    # Execute / Assert
    with pytest.raises(ConfigError):
        build_backbone(name, input_shape=input_shape)


def test_default_input_shape_rejects_unknown_name():
    # Execute / Assert
    with pytest.raises(ConfigError, match="unknown backbone"):
        default_input_shape("vgg")
