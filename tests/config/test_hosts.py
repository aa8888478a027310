"""`upstreamHosts` entries: whatever is written, a host a request can have or one line naming the fix."""

from __future__ import annotations

import ipaddress

from hypothesis import example, given
from hypothesis import strategies as st

from chaos_mode.config.hosts import host_entry

LABELS = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z]|)", fullmatch=True)
NAMES = st.lists(LABELS, min_size=1, max_size=4).map(".".join)
NAMES = NAMES.filter(lambda name: not name.rsplit(".", 1)[-1].isdigit())  # a name ending in a number: IPv4
HOSTS = NAMES | st.ip_addresses().map(str)


@given(st.text(max_size=80))
@example("https://api.z.ai")
@example("[::1]:8080")
@example("api.z.ai:")
def test_an_entry_is_a_host_mitmproxy_can_show_or_one_line_naming_why_not(entry: str) -> None:
    try:
        host = host_entry(entry)
    except ValueError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert host == entry.strip().lower()
    assert not any(char.isspace() or char in "/*[]@?#" for char in host)
    if ":" in host:
        ipaddress.IPv6Address(host)


@given(HOSTS, st.sampled_from(["https://{}", "http://{}:8080/v1", "{}:443", "{}/api/anthropic"]))
def test_a_url_port_or_path_around_a_host_is_refused_naming_the_host_alone(host: str, form: str) -> None:
    entry = form.format(f"[{host}]" if ":" in host else host)
    try:
        host_entry(entry)
    except ValueError as exc:
        assert str(exc).endswith(f"write the host name alone: {host}")
    else:
        raise AssertionError(f"{entry!r} accepted")
    assert host_entry(host) == host
