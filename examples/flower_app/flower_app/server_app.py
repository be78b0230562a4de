"""The ServerApp: Flower's stock FedAvg, wrapped by edgeprof's ProfiledStrategy for one report of the federation."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from edgeprof.flower import ProfiledStrategy
from flower_app.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(0)
    strategy = ProfiledStrategy(FedAvg(fraction_train=1.0, fraction_evaluate=1.0),
                                out=context.run_config.get("out", "profiles"), name="flower-app")
    strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()),
                   num_rounds=int(context.run_config.get("num-server-rounds", 3)))
    print(f"edgeprof report: {strategy.csv_path.resolve()}")  # relative to the SuperLink's folder, not yours
