"""The admin HTTP API (accounts/routes.py) on a real gateway: behind the master key,
404 with how to turn it on when there is none, OpenAI-shaped errors, and the keys it
creates and revokes working (or not) at once in the model APIs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from click.testing import CliRunner

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.gateway.config import load_config
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer, openai_client, running_gateway
from tests.fuzz.shapes import assert_error_shape

MASTER = "sk-master-0123456789"
STATIC = "sk-static-key"


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[RunningServer]:
    scripted = ScriptedBackend("scripted", models=("scripted", "other"))
    with running_gateway(
        {"scripted": scripted},
        server={"master_key": MASTER, "api_keys": [STATIC]},
        agent={"database": str(tmp_path / "gateway.db")},
    ) as server:
        yield server


def _auth(key: str = MASTER) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_without_a_master_key_the_admin_api_says_how_to_turn_it_on(tmp_path: Path) -> None:
    scripted = ScriptedBackend("scripted")
    with running_gateway(
        {"scripted": scripted}, agent={"database": str(tmp_path / "g.db")}
    ) as server:
        reply = httpx.get(server.url + "/admin/keys", headers=_auth())
    assert reply.status_code == 404
    message = assert_error_shape(Dialect.OPENAI, 404, reply.content)
    assert "--master-key" in message and "LLMBRIDGE_MASTER_KEY" in message


def test_the_master_key_is_required(admin: RunningServer) -> None:
    for headers in ({}, _auth("wrong"), _auth(STATIC), {"x-api-key": MASTER}):
        reply = httpx.get(admin.url + "/admin/keys", headers=headers)
        assert reply.status_code == 401, headers
        assert_error_shape(Dialect.OPENAI, 401, reply.content)
    # ... and it opens /admin only, not the model APIs.
    with pytest.raises(openai.AuthenticationError):
        openai_client(admin.url, MASTER).models.list()


def test_create_list_use_and_revoke(admin: RunningServer) -> None:
    created = httpx.post(
        admin.url + "/admin/keys",
        headers=_auth(),
        json={"name": "team-a", "rpm": 10, "models": ["scripted"]},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    key = body["key"]
    assert key.startswith("llmb-") and key.startswith(body["prefix"])
    assert (body["name"], body["rpm"], body["models"], body["revoked_at"]) == (
        "team-a",
        10,
        ["scripted"],
        None,
    )

    listed = httpx.get(admin.url + "/admin/keys", headers=_auth())
    assert listed.status_code == 200
    assert key not in listed.text
    (view,) = listed.json()["data"]
    assert view["name"] == "team-a" and "key" not in view and view["spent_usd"] == 0.0

    # The new key works at once; the static key still does.
    client = openai_client(admin.url, key)
    assert [m.id for m in client.models.list().data]
    reply = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "".join(Script().text)
    assert openai_client(admin.url, STATIC).models.list().data

    revoked = httpx.delete(admin.url + "/admin/keys/team-a", headers=_auth())
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    # The gateway that revoked it forgets its cached record at once.
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}]
        )
    assert "revoked" in caught.value.message


def test_bad_requests_name_the_field(admin: RunningServer) -> None:
    cases = [
        ({"rpm": 3}, "name"),
        ({"name": "x", "rpm": 0}, "rpm"),
        ({"name": "x", "rpm": "3"}, "rpm"),
        ({"name": "x", "budget_usd": -1}, "budget_usd"),
        ({"name": "x", "models": "gpt-4o"}, "models"),
        ({"name": "x", "colour": "red"}, "colour"),
    ]
    for body, field in cases:
        reply = httpx.post(admin.url + "/admin/keys", headers=_auth(), json=body)
        assert reply.status_code == 400, (body, reply.text)
        message = assert_error_shape(Dialect.OPENAI, 400, reply.content)
        assert reply.json()["error"]["param"] == field and field in message
    not_json = httpx.post(admin.url + "/admin/keys", headers=_auth(), content=b"{")
    assert not_json.status_code == 400
    assert httpx.post(admin.url + "/admin/keys", headers=_auth(), json={"name": "d"}).is_success
    dup = httpx.post(admin.url + "/admin/keys", headers=_auth(), json={"name": "d"})
    assert dup.status_code == 409 and "'d'" in assert_error_shape(Dialect.OPENAI, 409, dup.content)
    missing = httpx.delete(admin.url + "/admin/keys/nobody", headers=_auth())
    assert missing.status_code == 404
    assert "nobody" in assert_error_shape(Dialect.OPENAI, 404, missing.content)


def test_the_master_key_comes_from_the_flag_the_file_or_the_environment(tmp_path: Path) -> None:
    env = {"LLMBRIDGE_MASTER_KEY": "from-env"}
    assert load_config(None, environ=env).server.master_key == "from-env"
    assert load_config(None, {"master_key": "flag"}, environ=env).server.master_key == "flag"
    path = tmp_path / "llmbridge.yaml"
    path.write_text("server: {master_key: from-file, port: 1234}\n")
    config = load_config(path, environ=env)
    assert (config.server.master_key, config.server.port) == ("from-file", 1234)
    assert load_config(None, environ={}).server.master_key is None
    assert "--master-key" in CliRunner().invoke(cli, ["serve", "--help"]).stdout


def test_a_key_database_that_cannot_open_leaves_static_keys_working(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    scripted = ScriptedBackend("scripted")
    with running_gateway(
        {"scripted": scripted},
        server={"master_key": MASTER, "api_keys": [STATIC]},
        agent={"database": str(blocker / "gateway.db"), "enabled": False},
    ) as server:
        assert openai_client(server.url, STATIC).models.list().data
        with pytest.raises(openai.InternalServerError) as caught:
            openai_client(server.url, "llmb-" + "x" * 43).models.list()
        assert caught.value.status_code == 503 and "key database" in caught.value.message
        admin = httpx.get(server.url + "/admin/keys", headers=_auth())
        assert admin.status_code == 503
        assert "key database" in assert_error_shape(Dialect.OPENAI, 503, admin.content)
