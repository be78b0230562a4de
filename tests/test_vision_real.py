"""torchvision's edge models by name (``--backbone mobilenet_v3_small``, ``resnet18``, ``efficientnet_b0``), built
from the real torchvision: adapted to the data, never downloading weights, exported to ONNX as the same function
as torch, and trained for one round of PFLEGO and of FedAvg on the bundled digits (resized to 28x28).

These tests need a torchvision that imports with this torch (``EDGEPROF_EXTRAS=dev,vision bash scripts/setup.sh``;
``.ci/vision_check.sh`` builds that environment and runs them). Elsewhere they are skipped, with the reason;
with ``EDGEPROF_REQUIRE_TORCHVISION=1`` a torchvision that does not import is an error instead, so a run meant to
test the real models cannot pass by skipping them. The path without torchvision is tested with a stand-in module
in ``tests/test_custom_backbone.py``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from edgeprof.nn.names import VISION_BACKBONES


def _import_torchvision():
    """(torchvision.models, None), or (None, why it cannot be used)."""
    try:
        from torchvision import models
    except Exception as err:  # not installed, or a build for another torch that fails in its own way
        return None, f"{type(err).__name__}: {err}".splitlines()[0]
    return models, None


MODELS, WHY_NOT = _import_torchvision()
if MODELS is None:
    if os.environ.get("EDGEPROF_REQUIRE_TORCHVISION") == "1":
        pytest.fail(f"EDGEPROF_REQUIRE_TORCHVISION=1 but torchvision cannot be imported with torch "
                    f"{torch.__version__}: {WHY_NOT}", pytrace=False)
    pytest.skip(f"real torchvision not importable with torch {torch.__version__} ({WHY_NOT}); "
                f"EDGEPROF_EXTRAS=dev,vision bash scripts/setup.sh installs a pair that imports",
                allow_module_level=True)

from edgeprof.cli import app  # noqa: E402
from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.nn.backbones import build_backbone, get_params, input_shape_for, param_count, set_params  # noqa: E402
from edgeprof.nn.custom import CustomBackbone  # noqa: E402
from edgeprof.nn.ort import STRATEGIES, FeatureRunner  # noqa: E402
from edgeprof.nn.verify import perturbed  # noqa: E402
from edgeprof.report import read_report  # noqa: E402
from edgeprof.rounds.simulate import build_federation, load_clients  # noqa: E402

from round_checks import one_round_moves_the_weights_and_no_running_statistic  # noqa: E402
from edgeprof.nn.tolerances import float32_atol  # noqa: E402

DIGITS_SHAPE = (1, 28, 28)  # the bundled 8x8 digits, as a backbone outside Table 4 takes them


def _classifier(model: nn.Module) -> nn.Module:
    """torchvision's classification head: ``fc`` (ResNet) or ``classifier`` (MobileNet, EfficientNet)."""
    return model.fc if hasattr(model, "fc") else model.classifier


def _first_linear(head: nn.Module) -> nn.Linear:
    return head if isinstance(head, nn.Linear) else next(m for m in head.modules() if isinstance(m, nn.Linear))


def _weight_layers(module: nn.Module) -> tuple[int, int]:
    """(layers with a weight of two or more dimensions, their largest fan-in): the depth and reduction length of
    the float32 bound."""
    fan_ins = [int(np.prod(p.shape[1:])) for p in module.parameters() if p.dim() >= 2]
    return len(fan_ins), max(fan_ins)


@pytest.fixture
def recorded(monkeypatch):
    """Every torchvision model built, by its keyword arguments; any weight download fails the test."""
    calls = []

    def no_download(*args, **kwargs):
        raise AssertionError(f"a weight download was attempted: {args} {kwargs}")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_download)
    for name in VISION_BACKBONES:
        build = getattr(MODELS, name)

        def recording(*args, _build=build, **kwargs):
            calls.append(kwargs)
            return _build(*args, **kwargs)

        monkeypatch.setattr(MODELS, name, recording)
    return calls


@pytest.mark.parametrize("name", VISION_BACKBONES)
def test_a_torchvision_model_takes_the_datas_channels_without_its_classifier_or_a_download(recorded, name):
    # Prepare: the unadapted model, for an independent count of what the adaptation keeps
    original = getattr(MODELS, name)(weights=None)
    head = _classifier(original)
    first = next(m for m in original.modules() if isinstance(m, nn.Conv2d))
    head_params = sum(p.numel() for p in head.parameters())
    # the first convolution's weight goes from 3 input channels to 1; everything but the head is kept
    expected = param_count(original) - head_params - first.weight.numel() + first.weight.numel() // 3
    recorded.clear()
    # Execute
    module = build_backbone(name, input_shape_for(name, "digits"), seed=0)
    with torch.no_grad():
        features = module(torch.rand(3, *DIGITS_SHAPE))
    # Assert
    assert recorded == [{"weights": None}]
    assert isinstance(module, CustomBackbone) and module.input_shape == DIGITS_SHAPE
    assert next(m for m in module.modules() if isinstance(m, nn.Conv2d)).in_channels == 1
    assert isinstance(_classifier(module.net), nn.Identity)
    assert module.feature_dim == _first_linear(head).in_features
    assert features.shape == (3, module.feature_dim)
    assert param_count(module) == expected
    assert not any(m.training for m in module.modules())


@pytest.mark.parametrize("name", VISION_BACKBONES)
def test_the_same_seed_builds_the_same_theta(name):
    # Execute
    first, again, other = (get_params(build_backbone(name, DIGITS_SHAPE, seed=s)) for s in (3, 3, 4))
    # Assert
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], other[0])


@pytest.mark.parametrize("name", VISION_BACKBONES)
def test_the_onnx_export_gives_torchs_features_for_new_weights(name):
    # Prepare: theta moved off its initial values (batch-norm's weight and running variance no longer equal)
    module = build_backbone(name, DIGITS_SHAPE, seed=1)
    new = perturbed(get_params(module))
    x = np.random.default_rng(7).random((5, *DIGITS_SHAPE), dtype=np.float32)
    reference = build_backbone(name, DIGITS_SHAPE, seed=2)  # a second module, holding the new theta
    set_params(reference, new)
    with torch.no_grad():
        want = reference(torch.from_numpy(x)).numpy()
    depth, fan_in = _weight_layers(module)
    # Execute
    got = {strategy: FeatureRunner(module, threads=1, strategy=strategy).features(x, new) for strategy in STRATEGIES}
    # Assert
    for strategy, features in got.items():
        assert features.shape == (5, module.feature_dim), strategy
        np.testing.assert_allclose(features, want, rtol=0, atol=float32_atol(want, fan_in, depth), err_msg=strategy)


# PFLEGO with each of its engines (features in ONNX Runtime, or torch reusing one graph), FedAvg in torch
VARIANTS = [("pflego", "onnx"), ("pflego", "torch-reuse"), ("fedavg", "torch")]


@pytest.mark.parametrize("algo,engine", VARIANTS, ids=[f"{a}-{e}" for a, e in VARIANTS])
@pytest.mark.parametrize("name", VISION_BACKBONES)
def test_one_round_on_the_digits(name, algo, engine):
    # Prepare: the digits split over 40 clients as a run splits them; two of them take part (about 34 images each)
    cfg = RunConfig(algo=algo, tau=2, backbone=name, dataset="digits", clients=40, threads=1).resolved()
    clients = load_clients(cfg)[:2]
    federation = build_federation(RunConfig(algo=algo, engine=engine, tau=2, backbone=name, dataset="digits",
                                            clients=2, participation=1.0, threads=1), clients)
    assert all(c.x_train.shape[1:] == DIGITS_SHAPE for c in clients)
    # Execute and assert: finite losses and weights, the shared weights moved, no running statistic did
    one_round_moves_the_weights_and_no_running_statistic(federation, [c.client_id for c in clients])
    federation.close()


def test_measure_runs_a_torchvision_backbone_from_the_command_line(tmp_path):
    # Prepare
    out = tmp_path / "profiles"
    argv = ["measure", "--backbone", "mobilenet_v3_small", "--dataset", "digits", "--clients", "40",
            "--participation", "0.05", "--rounds", "1", "--tau", "2", "--threads", "1", "--no-progress",
            "--run-name", "vision", "--out", str(out)]
    # Execute
    result = CliRunner().invoke(app, argv)
    # Assert
    assert result.exit_code == 0, result.output
    rows = read_report(out / "vision.csv").where(kind="client")
    assert len(rows) == 2 and {r["backbone"] for r in rows} == {"mobilenet_v3_small"}
