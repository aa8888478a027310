"""chaos_state and chaos_state_share: parsed once, one-line errors, the password never shown."""

from __future__ import annotations

import pytest

from chaos_mode.fleet.state_url import PASSWORD_ENV, StateUrl, parse_share, parse_state_url, redact


def test_empty_means_in_process_state() -> None:
    assert parse_state_url("") is None
    assert parse_state_url("  ") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis://127.0.0.1:6390/2", StateUrl("redis", "127.0.0.1", 6390, 2)),
        ("redis://localhost", StateUrl("redis", "localhost", 6379, 0)),
        (
            "rediss://u:s3cret@redis.example:6380/1",
            StateUrl("rediss", "redis.example", 6380, 1, "u", "s3cret"),
        ),
        ("redis://:p%40ss@[::1]:7000/0", StateUrl("redis", "::1", 7000, 0, None, "p@ss")),
        (
            "rediss://h:6380/0?ssl_ca_certs=/etc/ssl/our%20ca.pem",
            StateUrl("rediss", "h", 6380, 0, ca_certs="/etc/ssl/our ca.pem"),
        ),
    ],
)
def test_urls(text: str, expected: StateUrl) -> None:
    parsed = parse_state_url(text, {})
    assert parsed == expected
    assert parsed is not None and parsed.password == expected.password


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("http://127.0.0.1:6379", "scheme must be redis:// or rediss://, not 'http'"),
        ("127.0.0.1:6379", "scheme"),
        ("redis://", "no host"),
        ("redis://h:99999/0", "not a valid URL"),
        ("redis://h:6379/zero", "database must be a number"),
        ("redis://h:6379/0?db=1", "the only query parameter is ssl_ca_certs=PATH .* not 'db'"),
        ("rediss://h/0?ssl_ca_certs=/a&ssl_ca_certs=/b", "the only query parameter is ssl_ca_certs"),
        ("rediss://h/0?junk", "the only query parameter is ssl_ca_certs"),
        ("redis://h/0?ssl_ca_certs=/ca.pem", "ssl_ca_certs needs rediss://"),
        ("rediss://h/0?ssl_ca_certs=", "ssl_ca_certs: no path"),
        ("redis://h:6379/0#top", "no fragment"),
        ("redis://:hunter2@h:notaport/0", "not a valid URL"),
    ],
)
def test_bad_urls_say_why_in_one_line_without_the_password(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error) as info:
        parse_state_url(text, {})
    assert "\n" not in str(info.value)
    assert "hunter2" not in str(info.value)


def test_the_password_may_come_from_the_environment_and_is_never_displayed() -> None:
    url = parse_state_url("rediss://cache.internal:6380/3", {PASSWORD_ENV: "from-env"})
    assert url is not None and url.password == "from-env" and url.tls
    assert url.display == "rediss://:***@cache.internal:6380/3"
    assert "from-env" not in repr(url)
    assert redact("auth failed for from-env", url) == "auth failed for ***"
    inline = parse_state_url("redis://user:inline@h/0", {PASSWORD_ENV: "from-env"})
    assert inline is not None and inline.password == "inline"
    assert inline.display == "redis://user:***@h:6379/0"
    private = parse_state_url("rediss://:pw@h/0?ssl_ca_certs=/ca.pem", {})
    assert private is not None and private.display == "rediss://:***@h:6379/0?ssl_ca_certs=/ca.pem"
    assert parse_state_url("redis://h/0", {}) == StateUrl("redis", "h", 6379, 0)


@pytest.mark.parametrize(
    ("text", "share"), [("auto", None), ("", None), ("0.5", 0.5), ("1", 1.0), ("25%", 0.25)]
)
def test_shares(text: str, share: float | None) -> None:
    assert parse_share(text) == share


@pytest.mark.parametrize("text", ["0", "1.5", "-0.2", "half", "nan"])
def test_bad_shares(text: str) -> None:
    with pytest.raises(ValueError, match="must be auto or a fraction"):
        parse_share(text)
