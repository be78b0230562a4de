"""A hostile Flower node for tests: edgeprof's own ClientApp, except that a node whose node config has
``hostile-key=<metric>`` and ``hostile-value=<number>`` answers the server's roll call with that metric set to that
number, and one with ``hostile-profile=<JSON cells>`` writes those cells over the profile of its training replies;
every other message it answers as an honest node does, and a node without those keys is honest.

Loaded as a Flower app's ``clientapp`` component (``hostile_client:app``, with tests/ on the PYTHONPATH) by the
SuperNodes of a loopback deployment, or called in process (:func:`make_hostile_app`).
"""

from __future__ import annotations

import json

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from edgeprof.flower.client_app import make_client_app
from edgeprof.flower.energy import PROFILE_RECORD

HOSTILE_KEY, HOSTILE_VALUE = "hostile-key", "hostile-value"
#: a node config key whose value (JSON: cells) is written over the profile of each of the node's training replies
HOSTILE_PROFILE = "hostile-profile"


def make_hostile_app(honest: ClientApp | None = None) -> ClientApp:
    """A ClientApp that passes every message to ``honest`` (edgeprof's ClientApp by default) and, on a hostile
    node, rewrites one metric of its roll-call answer, or cells of its training replies' profile."""
    honest = honest or make_client_app()
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        reply = honest(msg, context)
        key = context.node_config.get(HOSTILE_KEY)
        if key:
            reply.content["metrics"][str(key)] = context.node_config[HOSTILE_VALUE]
        return reply

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        reply = honest(msg, context)
        cells = context.node_config.get(HOSTILE_PROFILE)
        if cells and PROFILE_RECORD in reply.content:
            reply.content[PROFILE_RECORD].update(json.loads(str(cells)))
        return reply

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return honest(msg, context)

    return app


app = make_hostile_app()
