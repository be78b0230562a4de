"""The ClientApp: Flower's quickstart shape; edgeprof is the one mod in ``mods=[...]``."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from edgeprof.flower import energy_mod
from flower_app.task import Net, load_data, test, train

app = ClientApp(mods=[energy_mod()])


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    torch.manual_seed(int(msg.content["config"]["server-round"]))
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = load_data(int(context.node_config["partition-id"]))
    loss = train(model, x, y, epochs=int(context.run_config.get("local-epochs", 1)))
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(x)})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate_fn(msg: Message, context: Context) -> Message:
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = load_data(int(context.node_config["partition-id"]))
    loss, accuracy = test(model, x, y)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": accuracy, "num-examples": len(x)})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
