"""Render supervisord's configuration for a stack.

supervisord (not a foreman-style runner) because a stack must survive one service dying: it
restarts the program (``autorestart``) while the others keep serving, which is what the
degradations (docs/architecture.md, "Degrade or fail") and the e2e kill tests rely on. Secrets never
go in this file: the shared environment (internal token included) is given to supervisord's own
process and inherited by its children.
"""

from __future__ import annotations

from pathlib import Path

from services.stack.plan import Program


def socket_path(stack_dir: Path) -> Path:
    return stack_dir / "supervisor.sock"


def render(programs: list[Program], stack_dir: Path, *, workdir: Path) -> str:
    logs = stack_dir / "logs"
    lines = [
        "[unix_http_server]",
        f"file={socket_path(stack_dir)}",
        "chmod=0700",
        "",
        "[supervisord]",
        f"logfile={stack_dir / 'supervisord.log'}",
        f"pidfile={stack_dir / 'supervisord.pid'}",
        f"childlogdir={logs}",
        "nodaemon=true",
        "silent=true",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        "",
        "[supervisorctl]",
        f"serverurl=unix://{socket_path(stack_dir)}",
    ]
    for p in programs:
        lines += [
            "",
            f"[program:{p.name}]",
            f"command={' '.join(_quote(a) for a in p.argv)}",
            f"directory={workdir}",
            f"priority={p.priority}",
            "autostart=true",
            "autorestart=true",
            "startsecs=2",
            "startretries=20",  # dependencies still starting: retry with supervisord's growing backoff
            "stopsignal=TERM",
            f"stopwaitsecs={p.stop_wait_s}",
            f"stopasgroup={'true' if p.stop_as_group else 'false'}",
            "killasgroup=true",  # after stopwaitsecs, nothing of the program survives
            "redirect_stderr=true",
            f"stdout_logfile={logs / (p.name + '.log')}",
            "stdout_logfile_maxbytes=20MB",
            "stdout_logfile_backups=2",
        ]
        env = {k: f'"{_escape(v)}"' for k, v in p.env.items()}
        # a reference, expanded by supervisord from its own environment: the secret is not in this file
        env.update((k, f'"%(ENV_{ref})s"') for k, ref in p.env_refs.items())
        if env:
            lines.append("environment=" + ",".join(f"{k}={v}" for k, v in sorted(env.items())))
    return "\n".join(lines) + "\n"


def _quote(arg: str) -> str:
    """supervisord splits ``command`` with shlex; ``%`` starts its own expansions."""
    arg = arg.replace("%", "%%")
    if arg == "" or any(c in arg for c in " \t\"'\\"):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def _escape(value: str) -> str:
    return value.replace("%", "%%").replace('"', '\\"')
