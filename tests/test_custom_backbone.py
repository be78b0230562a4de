"""Your own backbone (docs/own-code.md, "Your own backbone"): factory specs and torchvision names behind edgeprof's
interface, the checks on the way in, and the ONNX export checked against torch, through every algorithm and
the command line. The backbones themselves are in ``tests/custom_backbones.py``, outside the package."""

from __future__ import annotations

import io
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from edgeprof.algorithms import ALGORITHMS, pflego
from edgeprof.cli import app
from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError, ModelError
from edgeprof.nn import ort
from edgeprof.nn.backbones import build_backbone, get_params, input_shape_for, set_params
from edgeprof.nn.names import check_backbone, factory_spec
from edgeprof.nn.custom import CustomBackbone
from edgeprof.nn.ort import STRATEGIES, FeatureRunner
from edgeprof.nn.verify import check_export, perturbed
from edgeprof.report import read_report
from edgeprof.rounds.simulate import build_federation
from edgeprof.nn.compute import Compute

import custom_backbones
from conftest import make_clients
from round_checks import one_round_moves_the_weights_and_no_running_statistic
from edgeprof.nn.tolerances import float32_atol

HERE = Path(__file__).resolve().parent
SPEC = "custom_backbones:small_cnn"
FILE_SPEC = f"{HERE / 'custom_backbones.py'}:small_cnn"
SHAPE = (1, 8, 8)
FAST = ["--dataset", "synthetic", "--synthetic-samples", "48", "--synthetic-classes", "4", "--clients", "2",
        "--participation", "1", "--rounds", "1", "--tau", "2", "--threads", "1", "--no-progress"]


def _reference(spec: str, params, x: np.ndarray) -> np.ndarray:
    """Independent features: a second module built from the same factory, holding ``params``, in eval mode."""
    module = build_backbone(spec, x.shape[1:], seed=99)
    set_params(module, params)
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def _one_error_line(result) -> str:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


# --- building ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,shape,feature_dim", [
    (SPEC, SHAPE, 6),                           # factory(input_shape)
    ("custom_backbones:TinyNet", SHAPE, 3),     # a Module class as the factory
    ("custom_backbones:zero_arg", (1, 28, 28), 5),  # a factory without arguments
    (FILE_SPEC, SHAPE, 6),                      # path/to/file.py:factory
])
def test_a_factory_spec_builds_a_backbone_with_its_feature_dim_discovered(spec, shape, feature_dim):
    module = build_backbone(spec, shape, seed=0)

    with torch.no_grad():
        features = module(torch.rand(3, *shape))

    assert isinstance(module, CustomBackbone)
    assert (module.backbone_name, module.input_shape, module.feature_dim) == (spec, shape, feature_dim)
    assert features.shape == (3, feature_dim)


def test_the_backbone_is_seeded_and_pinned_to_eval_mode():
    state_before = torch.random.get_rng_state()

    first, again, other = (build_backbone(SPEC, SHAPE, seed=s) for s in (3, 3, 4))
    first.train()  # what a training loop would do: ignored

    assert all(np.array_equal(a, b) for a, b in zip(get_params(first), get_params(again)))
    assert not np.array_equal(get_params(first)[0], get_params(other)[0])
    assert torch.equal(torch.random.get_rng_state(), state_before)
    assert not any(m.training for m in first.modules())


@pytest.mark.parametrize("dataset,shape", [("cifar10", (3, 32, 32)), ("mnist", (1, 28, 28)),
                                           ("digits", (1, 28, 28)), ("omniglot", (1, 28, 28))])
def test_a_backbone_outside_table_4_takes_the_datas_own_shape(dataset, shape):
    assert input_shape_for(SPEC, dataset) == shape
    assert input_shape_for("resnet18", dataset) == shape
    assert input_shape_for("cnn-cifar", dataset) == (3, 32, 32)  # Table 4's keep their paper's shape


@pytest.mark.parametrize("value,parts", [("pkg.mod:make", ("pkg.mod", "make")), ("m:Net.build", ("m", "Net.build")),
                                         ("nets/edge.py:factory", ("nets/edge.py", "factory")),
                                         ("mlp", None), ("a b:c", None), ("mod:", None), ("mod:1x", None)])
def test_the_form_of_a_factory_spec(value, parts):
    assert factory_spec(value) == parts


def test_config_accepts_names_and_factory_specs_and_refuses_anything_else():
    from edgeprof.nn import backbones, names

    for value in ("mlp", "resnet18", SPEC, FILE_SPEC):
        check_backbone(value)
    assert names.TABLE4_BACKBONES is backbones.BACKBONES  # one list, owned by edgeprof.nn.names
    with pytest.raises(ConfigError, match="unknown backbone 'vgg'; choose one of: mlp, .*module:factory"):
        RunConfig(backbone="vgg")


# --- refusals: one line each ------------------------------------------------------------------------------
REFUSED = [
    ("onnx_differs", ModelError,
     "differs from torch at layer 'doubler' (Doubler; ONNX node '/net/doubler/Mul', ops Constant, Mul): "
     "max |difference|"),
    ("parameter_as_constant", ModelError, "differs from torch in the forward of _ScaledByItem itself"),
    ("batch_norm_training", ModelError, "layer '1' (StubbornBatchNorm) stays in training mode after .eval()"),
    ("batch_statistics", ModelError, "an image's features depend on the other images of its batch"),
    ("random_dropout", ModelError, "other features for the same images in a second pass"),
    ("spatial_output", ModelError, "must map (N, C, H, W) images to (N, M) features; on a (1, 1, 8, 8) batch it "
                                   "returned shape (1, 4, 8, 8)"),
    ("classifier_left_in", ModelError, "parameter 'classifier.weight' is not used to compute the features"),
    ("not_a_module", ModelError, "the factory returned a str, not a torch.nn.Module"),
    ("fails", ModelError, "the factory failed for input shape (1, 8, 8): ValueError: this factory cannot"),
    ("exits", ModelError, "the factory failed for input shape (1, 8, 8): it called sys.exit(3)"),
    # a class whose constructor takes more than the shape: named, not a bare TypeError from its __init__
    ("NeedsWidth", ModelError, "edgeprof calls the factory as factory(input_shape) with the data's (C, H, W), or "
                               "factory() if it takes no positional argument, and it cannot be called so (missing a "
                               "required argument: 'depth')"),
    ("no_such_factory", ConfigError, "custom_backbones has no 'no_such_factory'"),
    ("drops_the_batch", ModelError, "backbone 'custom_backbones:drops_the_batch' gives features of shape (1, 5) for a "
                                    "batch of 3 images: they must keep the batch"),
    ("nan_features", ModelError, "gives NaN or infinite features for 3 seeded images"),
]


@pytest.mark.parametrize("factory,error,line", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_backbone_edgeprof_cannot_use_is_refused_with_one_line(factory, error, line):
    with pytest.raises(error) as caught:
        FeatureRunner(build_backbone(f"custom_backbones:{factory}", SHAPE), threads=1)

    assert line in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("spec,line", [("no_such_module_xyz:factory", "cannot import backbone module"),
                                       ("missing/nets.py:factory", "backbone file missing/nets.py does not exist")])
def test_a_spec_that_names_nothing_importable_is_a_config_error(spec, line):
    with pytest.raises(ConfigError, match=line):
        build_backbone(spec, SHAPE)


@pytest.mark.parametrize("nan_in", ["want", "both"])
def test_a_nan_in_torchs_features_hides_no_difference_of_the_export_beside_it(nan_in):
    # Prepare: torch's features with a NaN column, and an export's that double every finite one
    from edgeprof.nn.verify import difference

    module = build_backbone(SPEC, SHAPE)
    want = np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(3, 4)
    want[:, 0] = np.nan
    got = 2 * want if nan_in == "both" else np.nan_to_num(2 * want)
    # Execute
    diff, tol = difference(module, want, got)
    # Assert: NaN against NaN is no difference, NaN against a number is infinite; the doubled features are found
    assert diff > tol
    assert diff == (np.inf if nan_in == "want" else 2.0)  # the largest finite feature, 2.0, doubled: 2.0 apart


def test_an_export_that_ties_running_variance_to_the_weight_is_refused_naming_the_layer():
    """torch's exporter, left to de-duplicate initializers, serves batch-norm's running variance from its weight
    (both ones at initialisation); edgeprof's export does not, and the check catches an export that does."""
    module = build_backbone(SPEC, SHAPE)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(1, *SHAPE),), buffer, input_names=["x"], output_names=["features"],
                          dynamic_axes={"x": {0: "batch"}, "features": {0: "batch"}}, opset_version=17,
                          do_constant_folding=False, **ort._torchscript_exporter())
    tied = onnx.load_from_string(buffer.getvalue())
    names = ort._param_names(tied, module)

    with pytest.raises(ModelError, match=r"at layer '1' \(BatchNorm2d; ONNX node '/net/net.1/BatchNormalization'"):
        check_export(module, tied, names, ort._RebuildFeed(tied, names, threads=1).run)
    FeatureRunner(module, threads=1)  # edgeprof's own export of the same module passes


def test_a_cached_export_older_than_the_models_code_is_exported_again(monkeypatch, rng):
    import custom_backbones

    FeatureRunner(build_backbone(SPEC, SHAPE), threads=1)  # exported and cached (process and disk) with ReLU
    original = custom_backbones.small_cnn

    def edited(shape):  # the same parameters, another activation: the same cache keys
        net = original(shape)
        net[2] = nn.Tanh()
        return net

    monkeypatch.setattr(custom_backbones, "small_cnn", edited)
    module = build_backbone(SPEC, SHAPE)
    x = rng.random((3, *SHAPE), dtype=np.float32)

    features = FeatureRunner(module, threads=1).features(x, get_params(module))

    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(features, want, rtol=0, atol=float32_atol(want, fan_in=64, depth=3))


# --- ONNX round trip and every algorithm ------------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_onnx_features_equal_torch_features_for_new_weights(rng, strategy):
    module = build_backbone(SPEC, SHAPE, seed=1)
    runner = FeatureRunner(module, threads=1, strategy=strategy)
    new = perturbed(get_params(build_backbone(SPEC, SHAPE, seed=2)))  # batch-norm's weight is no longer ones
    x = rng.random((5, *SHAPE), dtype=np.float32)

    features = runner.features(x, new)

    want = _reference(SPEC, new, x)
    np.testing.assert_allclose(features, want, rtol=0, atol=float32_atol(want, fan_in=64, depth=3))


VARIANTS = [(name, engine) for name, spec in ALGORITHMS.items() for engine in spec.engines]


@pytest.mark.parametrize("algo,engine", VARIANTS, ids=[f"{a}-{e}" for a, e in VARIANTS])
def test_every_algorithm_runs_a_round_on_your_own_backbone(rng, algo, engine):
    cfg = RunConfig(algo=algo, engine=engine, tau=2, backbone=SPEC, dataset="synthetic", clients=3,
                    participation=1.0, threads=1).resolved()
    clients = make_clients(rng, shape=input_shape_for(SPEC, "synthetic"))
    federation = build_federation(cfg, clients)

    one_round_moves_the_weights_and_no_running_statistic(federation, [c.client_id for c in clients])

    assert not federation.runtime.backbone.training
    federation.close()


def test_both_pflego_engines_compute_the_same_round_with_batch_norm_and_dropout(rng):
    module = build_backbone(SPEC, SHAPE, seed=3)
    theta = perturbed(get_params(module))
    x, y = rng.random((11, *SHAPE), dtype=np.float32), np.arange(11) % 3
    head = rng.normal(scale=0.3, size=(3, module.feature_dim + 1)).astype(np.float32)
    runner = FeatureRunner(module, threads=1)
    kwargs = dict(tau=4, beta=0.2, rho=0.05, scale=2.0)

    joint = lambda h, a, b: pflego.torch_joint_gradient(module, theta, h, a, b, Compute())  # noqa: E731
    paper = pflego.client_round(lambda a: runner.features(a, theta), joint, head, x, y, **kwargs)
    engine = pflego.GraphReuse(module, theta, Compute())
    reuse = pflego.client_round(engine.features, engine.joint_grad, head, x, y, **kwargs)

    depth = 3 + kwargs["tau"]  # forward, tau-1 head steps, backward
    np.testing.assert_allclose(reuse.head, paper.head, rtol=0, atol=float32_atol(paper.head, 64, depth))
    for a, b in zip(reuse.theta_grad, paper.theta_grad):
        np.testing.assert_allclose(a, b, rtol=0, atol=float32_atol(paper.theta_grad, 64, depth))


def test_the_flower_apps_build_the_same_seeded_backbone_as_the_in_process_run(rng):
    pytest.importorskip("flwr")
    from edgeprof.flower.client_app import runtime_for
    from edgeprof.rounds.runtime import build_runtime
    from edgeprof.flower.strategy import server_runtime

    cfg = RunConfig(algo="pflego", backbone=SPEC, dataset="cifar10", seed=5, threads=1).resolved()
    clients = make_clients(rng, shape=(3, 32, 32))

    runtimes = [build_runtime(cfg, max(c.num_classes for c in clients)), runtime_for(cfg, 3), server_runtime(cfg, 3)]

    first = runtimes[0].initial_params
    assert all(rt.backbone.input_shape == (3, 32, 32) and rt.feature_dim == 6 for rt in runtimes)
    assert all(all(np.array_equal(a, b) for a, b in zip(first, rt.initial_params)) for rt in runtimes[1:])


# --- the command line -------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [SPEC, FILE_SPEC])
def test_measure_runs_your_own_backbone_from_the_command_line(tmp_path, spec):
    out = tmp_path / "profiles"

    result = CliRunner().invoke(app, ["measure", *FAST, "--backbone", spec, "--run-name", "own", "--out", str(out)])

    assert result.exit_code == 0, result.output
    rows = read_report(out / "own.csv").where(kind="client")
    assert len(rows) == 2 and {r["backbone"] for r in rows} == {spec}


def test_a_module_in_the_current_folder_is_found_as_python_m_would(tmp_path, monkeypatch):
    (tmp_path / "my_edge_nets.py").write_text(
        "from torch import nn\n\ndef grey(shape):\n    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 3))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])

    result = CliRunner().invoke(app, ["export", "--backbone", "my_edge_nets:grey", "--out", "models"])

    assert result.exit_code == 0, result.output
    assert (tmp_path / "models" / "my_edge_nets_grey.onnx").is_file() and "3 features" in result.stdout


@pytest.mark.parametrize("spec,code,line", [
    ("custom_backbones:onnx_differs", 6, "the ONNX export of backbone 'custom_backbones:onnx_differs' differs from "
                                         "torch at layer 'doubler'"),
    ("custom_backbones:batch_norm_training", 6, "stays in training mode after .eval()"),
    ("no_such_module_xyz:factory", 2, "cannot import backbone module 'no_such_module_xyz'"),
    ("not a spec", 2, "unknown backbone 'not a spec'; choose one of: mlp, cnn-cifar, cnn-omniglot"),
])
def test_measure_refuses_a_backbone_with_one_line_and_its_exit_code(tmp_path, spec, code, line):
    out = tmp_path / "profiles"

    result = CliRunner().invoke(app, ["measure", *FAST, "--backbone", spec, "--out", str(out)])

    assert result.exit_code == code, result.output
    assert line in _one_error_line(result)
    assert not list(out.glob("*.csv"))  # refused during set-up: no report


def test_a_backbone_that_raises_mid_run_is_one_line_naming_its_line_and_the_report_keeps_round_1(tmp_path):
    out = tmp_path / "profiles"

    result = CliRunner().invoke(app, ["measure", *FAST, "--rounds", "3", "--backbone",
                                      "custom_backbones:gives_up_in_round_2", "--run-name", "up", "--out", str(out)])

    assert result.exit_code == 6, result.output
    line = _one_error_line(result)
    assert line.startswith("edgeprof: error: backbone 'custom_backbones:gives_up_in_round_2' raised in its forward "
                           "pass on a (")
    assert f"batch: ValueError: the layer gave up (at {custom_backbones.__file__}:" in line
    assert line.endswith(f", in forward); the report keeps every round that finished ({out / 'up.csv'})")
    report = read_report(out / "up.csv")
    assert report.sidecar["status"] == "failed" and "the layer gave up" in report.sidecar["reason"]
    assert report.sidecar["rounds_completed"] == 1 and {r["round"] for r in report.where(kind="client")} == {"1"}


def test_export_writes_your_own_backbone_in_the_datas_shape(tmp_path):
    argv = ["export", "--backbone", FILE_SPEC, "--dataset", "cifar10", "--out", str(tmp_path)]

    result = CliRunner().invoke(app, argv)

    assert result.exit_code == 0, result.output
    (path,) = tmp_path.glob("*.onnx")
    model = onnx.load(str(path))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    assert dims == [3, 32, 32] and path.name.endswith("custom_backbones.py_small_cnn.onnx")
    assert "6 features" in result.stdout


# --- torchvision --------------------------------------------------------------------------------------------
# The real models (mobilenet_v3_small, resnet18, efficientnet_b0) are tested against the real torchvision in
# tests/test_vision_real.py (.ci/vision_check.sh, a CI leg); here only the path where it is missing or broken.
@pytest.mark.parametrize("installed,line", [
    (None, "torchvision is not installed: pip install 'edgeprof[vision]'"),
    (types.ModuleType("torchvision"), "torchvision cannot be imported (ImportError"),  # a broken build
])
def test_without_a_usable_torchvision_its_names_are_a_config_error(tmp_path, monkeypatch, installed, line):
    monkeypatch.setitem(sys.modules, "torchvision", installed)
    monkeypatch.delitem(sys.modules, "torchvision.models", raising=False)  # a real one imported by another test

    with pytest.raises(ConfigError) as caught:
        build_backbone("resnet18", (1, 28, 28))
    result = CliRunner().invoke(app, ["measure", *FAST, "--backbone", "resnet18", "--out", str(tmp_path)])

    assert line in str(caught.value)
    assert result.exit_code == 2 and line in _one_error_line(result)


def test_a_backbone_with_an_operator_onnx_cannot_export_is_one_line_on_screen(tmp_path):
    """torch's TorchScript exporter dumps its graph on standard output (at the file descriptor, from its C++ log)
    before it raises; on screen the refusal is edgeprof's one line and its exit code, nothing else."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-m", "edgeprof", "measure", "--algo", "pflego", "--backbone", "custom_backbones:unexportable",
         "--dataset", "synthetic", "--rounds", "1", "--tau", "2", "--clients", "2", "--no-progress",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{tests}{os.pathsep}{tests.parent}"})

    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 6, done.stdout + done.stderr  # a model edgeprof cannot use (docs/measuring.md)
    assert len(lines) == 1 and "aten::special_i0e" in lines[0] and "ONNX export failed" in lines[0], lines
