"""ONNX export and the ONNX Runtime feature runner, checked against torch's own forward pass."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from edgeprof.errors import ConfigError, ModelError, OutputError
from edgeprof.nn.backbones import BACKBONES, build_backbone, get_params, set_params
from edgeprof.nn.ort import STRATEGIES, FeatureRunner, export_backbone

ATOL = 1e-5


def torch_features(name: str, params: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """The independent reference: a torch module holding ``params``, no-grad forward."""
    module = build_backbone(name)
    set_params(module, params)
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def images(name: str, batch: int, seed: int = 0) -> np.ndarray:
    shape = build_backbone(name).input_shape
    return np.random.default_rng(seed).standard_normal((batch, *shape)).astype(np.float32)


@pytest.fixture(scope="module")
def runners():
    """One runner per (backbone, strategy), built on first use and shared by this module's tests."""
    built: dict[tuple[str, str], FeatureRunner] = {}

    def get(name: str, strategy: str) -> FeatureRunner:
        if (name, strategy) not in built:
            built[name, strategy] = FeatureRunner(build_backbone(name), threads=1, strategy=strategy)
        return built[name, strategy]

    return get


@pytest.mark.parametrize("batch", [1, 7])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", BACKBONES)
def test_onnx_features_equal_torch_features(runners, name, strategy, batch):
    # Prepare
    params = get_params(build_backbone(name, seed=2))
    x = images(name, batch)
    # Execute
    features = runners(name, strategy).features(x, params)
    # Assert
    assert features.dtype == np.float32
    assert features.shape == (batch, build_backbone(name).feature_dim)
    np.testing.assert_allclose(features, torch_features(name, params, x), atol=ATOL, rtol=0)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", BACKBONES)
def test_new_weights_are_picked_up_not_a_stale_session(runners, name, strategy):
    # Prepare
    runner, x = runners(name, strategy), images(name, 5, seed=1)
    old, new = (get_params(build_backbone(name, seed=s)) for s in (10, 11))
    expected_new = torch_features(name, new, x)
    runner.features(x, old)
    # Execute
    after_new = runner.features(x, new)
    new[0] *= 2.0  # the same arrays, updated in place: identity alone would miss this
    after_in_place = runner.features(x, new)
    back_to_old = runner.features(x, old)
    # Assert
    np.testing.assert_allclose(after_new, expected_new, atol=ATOL, rtol=0)
    np.testing.assert_allclose(after_in_place, torch_features(name, new, x), atol=ATOL, rtol=0)
    np.testing.assert_allclose(back_to_old, torch_features(name, old, x), atol=ATOL, rtol=0)
    assert not np.allclose(after_new, back_to_old, atol=1e-3)


@pytest.mark.parametrize("name", BACKBONES)
def test_export_writes_a_valid_model_with_a_dynamic_batch_axis(tmp_path, name):
    # Prepare
    path = tmp_path / "models" / "nested" / f"{name}.onnx"
    # Execute
    written = export_backbone(build_backbone(name), path)
    # Assert
    model = onnx.load(str(written))
    onnx.checker.check_model(model)
    inputs, outputs = model.graph.input, model.graph.output
    assert written == path
    assert [i.name for i in inputs] == ["x"] and [o.name for o in outputs] == ["features"]
    assert inputs[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert outputs[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_export_into_an_unwritable_folder_is_an_output_error(tmp_path):
    # Prepare: a regular file where the parent folder should be
    blocker = tmp_path / "models"
    blocker.write_text("not a folder")
    # Execute / Assert
    with pytest.raises(OutputError, match="cannot write"):
        export_backbone(build_backbone("mlp"), blocker / "mlp.onnx")


def test_export_of_a_module_without_input_shape_is_a_model_error(tmp_path):
    # Execute / Assert
    with pytest.raises(ModelError):
        export_backbone(torch.nn.Linear(4, 2), tmp_path / "linear.onnx")


def test_runner_writes_its_model_into_model_dir(tmp_path):
    # Execute
    runner = FeatureRunner(build_backbone("mlp"), threads=1, model_dir=tmp_path / "models")
    # Assert
    assert (tmp_path / "models" / "mlp.onnx").is_file()
    assert runner.strategy == STRATEGIES[0] and runner.STRATEGIES == STRATEGIES


@pytest.mark.parametrize(
    "x_shape, params_fix, error",
    [
        ((2, 1, 32, 32), lambda p: p, ConfigError),
        ((2, 784), lambda p: p, ConfigError),
        ((2, 1, 28, 28), lambda p: p[:-1], ModelError),
        ((2, 1, 28, 28), lambda p: [p[0].T, *p[1:]], ModelError),
    ],
    ids=["wrong-image-size", "flat-images", "missing-array", "transposed-weight"],
)
def test_features_rejects_wrong_images_or_params(runners, x_shape, params_fix, error):
    # Prepare
    params = params_fix(get_params(build_backbone("mlp")))
    # Execute / Assert
    with pytest.raises(error):
        runners("mlp", STRATEGIES[0]).features(np.zeros(x_shape, dtype=np.float32), params)


def test_unknown_strategy_is_a_config_error():
    # Execute / Assert
    with pytest.raises(ConfigError, match="strategy"):
        FeatureRunner(build_backbone("mlp"), strategy="tensorrt")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_empty_batch_gives_empty_features(runners, strategy):
    # Prepare
    params = get_params(build_backbone("cnn-omniglot"))
    # Execute
    features = runners("cnn-omniglot", strategy).features(np.zeros((0, 1, 28, 28)), params)
    # Assert
    assert features.shape == (0, 64) and features.dtype == np.float32


@pytest.mark.parametrize("providers,device,strategy", [
    (["CPUExecutionProvider"], ("cpu", 0), "initializers-rebuild"),
    ([], ("cpu", 0), "initializers-rebuild"),
    ([("CUDAExecutionProvider", {"device_id": 2}), "CPUExecutionProvider"], ("cuda", 2), "io-binding"),
    ([("TensorrtExecutionProvider", {"device_id": 1}), ("CUDAExecutionProvider", {"device_id": 1}),
      "CPUExecutionProvider"], ("cuda", 1), "io-binding"),
])
def test_the_weight_strategy_follows_the_sessions_first_provider(providers, device, strategy):
    from edgeprof.nn.ort import default_strategy, ort_device

    assert ort_device(providers) == device
    assert default_strategy(providers) == strategy


def test_a_runner_given_the_cpu_provider_uses_the_measured_cpu_strategy():
    runner = FeatureRunner(build_backbone("mlp"), threads=1, providers=["CPUExecutionProvider"])
    assert runner.strategy == "initializers-rebuild" and runner.providers == ("CPUExecutionProvider",)
