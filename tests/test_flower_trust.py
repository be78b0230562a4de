"""What a Flower server may make a device do, and each device's own data.

The run config comes from whoever submits the run; a SuperNode applies only its experiment settings. Backbone code
to import runs only where the node's operator allows it (``allow-backbones``), a path the run config names is read
only inside the node's ``data-root``, and a node with its own ``data-dir`` trains on the data in it (real IDX files
here), whatever the run config says. Refusals are one ConfigError line (the ClientApp's reply then carries it).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.errors import ConfigError  # noqa: E402
from edgeprof.flower.client_app import load_client, node_cfg  # noqa: E402
from edgeprof.flower.config import check_trust, to_run_config, FlowerSettings  # noqa: E402
from test_data_files import write_idx_set  # noqa: E402


class Context:
    """The two parts of Flower's Context a ClientApp reads here."""

    def __init__(self, run_config: dict, node_config: dict) -> None:
        self.run_config, self.node_config = run_config, node_config


def _run_config(**kw) -> dict:
    cfg = RunConfig(algo="pflego", clients=2, dataset="mnist", backbone="mlp", progress=False, **kw)
    return to_run_config(cfg, FlowerSettings())


@pytest.mark.parametrize("backbone,node,refused", [
    ("mynets:small", {}, True),
    ("nets/small.py:build", {"allow-backbones": "mynets:*"}, True),
    ("mynets:small", {"allow-backbones": "other:*, mynets:*"}, False),
    ("resnet18", {}, False),  # a torchvision name: library code the node installed, nothing the server ships
])
def test_backbone_code_runs_only_where_the_node_allows_it(backbone, node, refused):
    cfg = RunConfig(backbone=backbone, progress=False)
    if refused:
        with pytest.raises(ConfigError, match="imports no backbone code a run config names") as err:
            check_trust(cfg, node)
        assert "\n" not in str(err.value) and "allow-backbones" in str(err.value)
    else:
        check_trust(cfg, node)


def test_a_path_the_run_config_names_is_read_only_inside_the_nodes_data_root(tmp_path):
    inside, outside = tmp_path / "root" / "mnist", tmp_path / "elsewhere"
    cfg = RunConfig(dataset="mnist", data_dir=inside, progress=False)

    with pytest.raises(ConfigError, match="reads no path a run config names"):
        check_trust(cfg, {})
    with pytest.raises(ConfigError, match="reads no path a run config names"):
        check_trust(RunConfig(dataset="mnist", data_dir=outside, progress=False), {"data-root": str(tmp_path / "root")})
    check_trust(cfg, {"data-root": str(tmp_path / "root")})
    check_trust(cfg, {"data-dir": str(tmp_path / "own")})  # the node's own data: the run's path is never read


def test_a_node_trains_on_its_own_data_folder(tmp_path):
    """Two devices, each with its own MNIST-format folder: each client is that folder's data (train and test
    pooled, split per class), labels local; the run config's data-dir is never consulted."""
    folders = [tmp_path / f"device{i}" for i in range(2)]
    written = [write_idx_set(folder, seed=10 + i, num_classes=3) for i, folder in enumerate(folders)]
    run_config = _run_config(data_dir=tmp_path / "the-servers-path")

    clients = []
    for pid, folder in enumerate(folders):
        node = {"partition-id": pid, "num-partitions": 2, "data-dir": str(folder)}
        cfg = node_cfg(Context(run_config, node))
        clients.append(load_client(cfg, pid, node))

    for client, files in zip(clients, written):
        labels = np.concatenate([files["train_y"], files["t10k_y"]])
        assert client.n_train + len(client.y_test) == len(labels) == 8
        assert list(client.classes) == sorted(set(labels.tolist()))
        assert set(client.y_train.tolist()) <= set(range(len(client.classes)))
    assert clients[0].client_id == 0 and clients[1].client_id == 1


def test_a_node_without_data_of_its_own_refuses_the_servers_path_in_one_line(tmp_path):
    context = Context(_run_config(data_dir=tmp_path / "the-servers-path"), {"partition-id": 0, "num-partitions": 2})

    with pytest.raises(ConfigError, match="reads no path a run config names") as err:
        node_cfg(context)
    assert "\n" not in str(err.value)
