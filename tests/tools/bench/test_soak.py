"""The soak's pure parts: its request mix, and how it reads tracebacks and log lines out of mitmdump's log."""

from __future__ import annotations

import random
from collections import Counter

from chaos_mode_tools.bench.soak.client import plan_request
from chaos_mode_tools.bench.soak.run import UPSTREAM_SHARES, SoakOptions, sim_settings, traceback_kinds

LOG = """\
[21:00:01.000] client connect
[21:00:01.100] chaos-mode: internal error while finishing a response
Traceback (most recent call last):
  File "/x/addon/chaos_mode/addon.py", line 375, in response
    await self._settle(flow, meta)
  File "/x/addon/chaos_mode/resend.py", line 55, in send
    answer = await self._client.fetch(outgoing, raise_error=False)
  File "/x/site-packages/tornado/simple_httpclient.py", line 340, in run
    stream = await self.tcp_client.connect(
tornado.iostream.StreamClosedError: Stream is closed
[21:00:01.200] client disconnect
"""


def test_a_traceback_is_named_by_its_exception_and_the_deepest_frame_of_ours() -> None:
    assert traceback_kinds(LOG) == Counter(
        {"tornado.iostream.StreamClosedError: Stream is closed (at resend.py:55 send)": 1}
    )
    assert traceback_kinds("[21:00:01.000] client connect\n") == Counter()


def test_the_mix_gives_the_client_its_share_of_the_faults() -> None:
    plans = [plan_request(random.Random(i), 0.04) for i in range(20_000)]
    kinds = Counter(plan.behaviour for plan in plans)
    assert abs(kinds["abort-queued"] / 20_000 - 0.02) < 0.005
    assert abs(kinds["abort-mid-stream"] / 20_000 - 0.02) < 0.005
    assert all(plan.model == "claude-opus-4-5" for plan in plans if plan.behaviour == "abort-queued")


def test_the_upstream_faults_make_up_the_rest_of_the_budget() -> None:
    rates = sim_settings(SoakOptions(fault_share=0.1), 1234).fault_rates
    assert set(rates) == set(UPSTREAM_SHARES)
    assert abs(sum(rates.values()) - 0.1 * 0.6 * sum(UPSTREAM_SHARES.values())) < 1e-9
