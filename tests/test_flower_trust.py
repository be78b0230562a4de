"""What a Flower server may make a device do, and each device's own data.

The run config comes from whoever submits the run; a SuperNode applies only its experiment settings. Backbone code
to import runs only where the node's operator allows it (``allow-backbones``), a path the run config names is read
only inside the node's ``data-root``, and a node with its own ``data-dir`` trains on the data in it (real IDX files
here), whatever the run config says. Refusals are one ConfigError line (the ClientApp's reply then carries it).
"""

from __future__ import annotations

import sys

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


@pytest.fixture
def code(tmp_path, monkeypatch):
    """A node's backbone code on disk: the allowed folder ``srv/nets`` (``good.py``, ``inner.py`` a link to it,
    ``out.py`` a link out of it, ``loop.py`` a link loop, ``sub/deep.py`` below it), ``evil/evil.py`` outside
    it, a link ``srv/alias`` to the folder, and a module ``mynets`` on sys.path that imports names it does not
    define. Every file but ``good.py`` writes its path to ``ran`` when its code runs; the test's folder is the
    current one."""
    nets, evil = tmp_path / "srv" / "nets", tmp_path / "evil"
    (nets / "sub").mkdir(parents=True)
    evil.mkdir()
    hostile = f"open({str(tmp_path / 'ran')!r}, 'a').write(__file__ + '\\n')\ndef f(shape):\n    return None\n"
    for path in (evil / "evil.py", nets / "sub" / "deep.py"):
        path.write_text(hostile)
    (nets / "good.py").write_text("def build(shape):\n    return None\n")
    (nets / "inner.py").symlink_to(nets / "good.py")
    (nets / "out.py").symlink_to(evil / "evil.py")
    (tmp_path / "srv" / "alias").symlink_to(nets, target_is_directory=True)
    (nets / "loop.py").symlink_to(nets / "loop2.py")
    (nets / "loop2.py").symlink_to(nets / "loop.py")
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "mynets.py").write_text(
        "import os\nfrom os import getcwd\n\n\ndef small(shape):\n    return None\n\n\n"
        "def make_tiny(shape):\n    return None\n\n\nclass Tiny:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("mynets", None)  # each test's own module


def _check(root, backbone: str, allow: str) -> None:
    """check_trust for ``backbone`` on a node whose ``allow-backbones`` is ``allow`` ({root}: the test's folder)."""
    check_trust(RunConfig(backbone=backbone.format(root=root), progress=False),
                {"allow-backbones": allow.format(root=root)})


@pytest.mark.parametrize("backbone,allow,reason", [
    ("{root}/srv/nets/../../evil/evil.py:f", "{root}/srv/nets/*.py:*", "allows it with"),  # '..' out of the folder
    ("srv/nets/sub/../../../evil/evil.py:f", "srv/nets/*.py:*", "allows it with"),  # the same, relative
    ("{root}/srv/nets/out.py:f", "{root}/srv/nets/*.py:*", "allows it with"),  # a link out of the folder
    ("{root}/srv/nets/sub/deep.py:f", "{root}/srv/nets/*.py:*", "allows it with"),  # '*' across a '/'
    ("{root}/srv/nets/sub/deep.py:f", "{root}/srv/*:*", "allows it with"),  # a '*' is one name
    ("{root}/srv/nets/loop.py:f", "{root}/srv/nets/*.py:*", "allows it with"),  # a link loop resolves nowhere
    ("{root}/srv/nets/a\nb.py:f", "{root}/srv/nets/*.py:*", "allows it with"),  # a line break, still one line
    ("mynets:os.getcwd", "mynets:*", "never a dotted path"),  # through what the module imported
    ("mynets:getcwd", "mynets:*", "not defined in mynets"),  # a name it imported (os.abort's way in)
    ("mynets:__class__", "mynets:*", "not defined in mynets"),  # the module object's own attributes
    ("mynets.os:getcwd", "mynets:*", "allows it with"),  # a '*' in a module pattern crosses no '.'
])
def test_an_allow_list_admits_no_path_out_of_its_folder_and_no_name_a_module_imported(code, backbone, allow, reason):
    # Execute
    with pytest.raises(ConfigError, match="imports no backbone code a run config names|not defined in") as err:
        _check(code, backbone, allow)
    # Assert: one line, the reason, and no code of the file ran
    assert "\n" not in str(err.value) and reason in str(err.value)
    assert not (code / "ran").exists()


@pytest.mark.parametrize("backbone,allow", [
    ("{root}/srv/nets/good.py:build", "{root}/srv/nets/*.py:*"),
    ("{root}/srv/nets/inner.py:build", "{root}/srv/nets/*.py:*"),  # a link that stays in the folder
    ("{root}/srv/nets/good.py:build", "{root}/srv/alias/*.py:*"),  # the allowed folder named through a link
    ("./srv/alias/good.py:build", "{root}/srv/nets/good.py:b*"),  # a relative spec, the file's real path
    ("mynets:make_tiny", "other:*, mynets:make_*"),
    ("mynets:Tiny", "mynets:*"),  # a class the module defines
])
def test_an_allow_list_admits_a_real_path_in_its_folder_and_a_modules_own_callables(code, backbone, allow):
    _check(code, backbone, allow)  # Execute and Assert: no ConfigError


@pytest.mark.parametrize("backbone,node,refused", [
    ("mynets:small", {}, True),
    ("nets/small.py:build", {"allow-backbones": "mynets:*"}, True),
    ("mynets:small", {"allow-backbones": "other:*, mynets:*"}, False),
    ("resnet18", {}, False),  # a torchvision name: library code the node installed, nothing the server ships
])
def test_backbone_code_runs_only_where_the_node_allows_it(code, backbone, node, refused):
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


def test_a_refusal_in_a_handler_is_one_logged_line_and_a_failed_reply(tmp_path, caplog, monkeypatch):
    """The client app's first mod: a node that refuses the run config answers with a failed reply whose reason is
    the refusal's one line (what the server logs for the node), and logs that line; nothing else is raised."""
    from flwr.app import Message, Metadata, RecordDict
    from flwr.app import MessageType
    from flwr.supercore.task_identity import TaskIdentity

    from edgeprof.flower.client_app import refuse_in_one_line

    for name in ("_run_id", "_node_id", "_task_id"):  # what a SuperNode's process sets before a handler runs
        monkeypatch.setattr(TaskIdentity, name, 1)
    query = Message(RecordDict(), metadata=Metadata(
        run_id=1, message_id="q", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="",
        created_at=0.0, ttl=60.0, message_type=MessageType.QUERY))
    context = Context(_run_config(data_dir=tmp_path / "the-servers-path"), {"partition-id": 0, "num-partitions": 2})

    reply = refuse_in_one_line(query, context, lambda msg, ctx: node_cfg(ctx))

    assert reply.has_error() and "reads no path a run config names" in reply.error.reason
    assert "\n" not in reply.error.reason
    assert [r.getMessage() for r in caplog.records if "reads no path" in r.getMessage()] == [reply.error.reason]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a CUDA GPU")
def test_a_node_whose_device_torch_cannot_use_refuses_the_roll_call_in_one_line(monkeypatch, caplog):
    """A node configured with compute-device="cuda" where torch sees no GPU answered the roll call, took a partition
    and then failed every round (or left a healthy node of that partition out); it is refused at the roll call, as
    every other node setting, naming the node config's key."""
    from flwr.app import Context as FlowerContext
    from flwr.app import Message, MessageType, Metadata, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from edgeprof.flower.client_app import make_client_app

    for name in ("_run_id", "_node_id", "_task_id"):  # what a SuperNode's process sets before a handler runs
        monkeypatch.setattr(TaskIdentity, name, 1)
    run_config = to_run_config(RunConfig(algo="pflego", clients=2, dataset="digits", backbone="mlp", progress=False),
                               FlowerSettings())
    context = FlowerContext(run_id=1, node_id=1, state=RecordDict(), run_config=run_config,
                            node_config={"partition-id": 0, "num-partitions": 2, "compute-device": "cuda"})
    query = Message(RecordDict(), metadata=Metadata(
        run_id=1, message_id="q", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="",
        created_at=0.0, ttl=60.0, message_type=MessageType.QUERY))

    reply = make_client_app()(query, context)

    assert reply.has_error() and "\n" not in reply.error.reason
    assert reply.error.reason.startswith("edgeprof: ConfigError: this node's compute-device 'cuda' (its node config, "
                                         "else the run's): torch ")


def test_a_node_with_fewer_cores_than_the_runs_threads_refuses_the_roll_call_naming_its_node_config_key(
        monkeypatch):
    """A run config's threads are each device's default: a node with fewer cores refuses at the roll call, in one
    line that names the key its node config sets, and a node config's own threads within its cores serve. The
    node's cores are os.cpu_count's (two here, whatever the runner has)."""
    from flwr.app import Context as FlowerContext
    from flwr.app import Message, MessageType, Metadata, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from edgeprof.flower.client_app import make_client_app

    for name in ("_run_id", "_node_id", "_task_id"):  # what a SuperNode's process sets before a handler runs
        monkeypatch.setattr(TaskIdentity, name, 1)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    run_config = to_run_config(RunConfig(algo="pflego", clients=2, dataset="digits", backbone="mlp", threads=8,
                                         progress=False), FlowerSettings())
    query = Message(RecordDict(), metadata=Metadata(
        run_id=1, message_id="q", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="",
        created_at=0.0, ttl=60.0, message_type=MessageType.QUERY))

    def ask(node_config):
        context = FlowerContext(run_id=1, node_id=1, state=RecordDict(), run_config=run_config,
                                node_config={"partition-id": 0, "num-partitions": 2, **node_config})
        return make_client_app()(query, context)

    refused, served = ask({}), ask({"threads": 2})

    assert refused.has_error() and "\n" not in refused.error.reason
    assert refused.error.reason == ("edgeprof: ConfigError: this node's threads 8 (its node config, else the run's): "
                                    "more than this machine's 2 cores (more intra-op threads only oversubscribe it); "
                                    "set threads in its --node-config")
    assert not served.has_error(), served.error.reason


def test_a_server_with_fewer_cores_than_the_runs_threads_runs_its_step_on_all_of_them(monkeypatch):
    """The server step runs where the SuperLink is: a run config whose threads (its devices') are more than the
    server's cores does not fail the run there; the step runs on the server's cores. torch's own thread count is
    put back after."""
    import torch

    from edgeprof.flower.strategy import server_runtime, server_threads

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    before = torch.get_num_threads()
    try:
        runtime = server_runtime(RunConfig(algo="pflego", clients=2, dataset="digits", backbone="mlp", threads=8,
                                           device="cpu", progress=False).resolved(), 10)
        assert runtime.compute.threads == 2 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert [server_threads(RunConfig(threads=t, progress=False)) for t in (None, 1, 2, 8)] == [None, 1, 2, 2]
