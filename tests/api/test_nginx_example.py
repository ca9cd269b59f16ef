"""The docs' nginx example (docs/examples/nginx.conf) stays what ``LocalNginx`` can run: every
line marked for a user to edit is found and given the test's ports and folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankflow.services import NGINX_EXAMPLE, nginx_config


def test_the_example_gets_the_ports_and_folders_of_a_local_run(tmp_path: Path) -> None:
    text = nginx_config(NGINX_EXAMPLE.read_text(), 18080, 18000, tmp_path, workers=1)
    assert "listen 127.0.0.1:18080;" in text
    assert "server 127.0.0.1:18000;" in text
    assert f"proxy_cache_path {tmp_path}/cache " in text
    assert f"pid {tmp_path}/nginx.pid;" in text and f"error_log {tmp_path}/error.log warn;" in text
    assert f"proxy_temp_path {tmp_path}/tmp-proxy;" in text
    directives = "".join(line.split("#")[0] for line in text.splitlines())
    assert "/var/" not in directives and "/run/" not in directives  # nothing left where only root may write


def test_an_example_without_a_marked_line_is_refused(tmp_path: Path) -> None:
    text = NGINX_EXAMPLE.read_text().replace("listen 8080;", "listen [::]:8080;")
    with pytest.raises(ValueError, match="listen"):
        nginx_config(text, 18080, 18000, tmp_path)
