"""``python -m grpo_trainer submit``: the driver Job's command.

Everything the driver learns about the run comes from the run config (name, UID, attempt);
how to reach the head comes from flags or Ray's own environment variables. The token and the
report key are only ever read from files.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.run_config import RUN_CONFIG_ENV, RUN_CONFIG_PATH
from grpo_trainer.driver import settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``submit`` subcommand."""
    env = os.environ
    p = subparsers.add_parser(
        "submit",
        help="submit this attempt's trainer to the RayCluster (Ray Jobs API), follow it, "
        "exit with its code",
        description=(
            "Submit the trainer as Ray job <run>-a<attempt> (or attach to it if it exists), "
            "stream its log to stdout and exit with its exit code. On SIGTERM, stop the job "
            "(the trainer checkpoints) and exit with the trainer's code."
        ),
    )
    p.add_argument(
        "--config", type=Path, default=None,
        help=f"the run config JSON (default: ${RUN_CONFIG_ENV}, else {RUN_CONFIG_PATH})",
    )
    p.add_argument(
        "--address", default=env.get(settings.ADDRESS_ENV),
        help=f"the head's Jobs API, e.g. http://<cluster>-head-svc.<ns>.svc:8265 "
        f"(default: ${settings.ADDRESS_ENV})",
    )
    p.add_argument(
        "--token-file", type=Path, default=_path_or_none(env.get(settings.TOKEN_PATH_ENV)),
        help=f"file holding the cluster's Ray auth token (default: ${settings.TOKEN_PATH_ENV}; "
        "none: send no token)",
    )
    p.add_argument(
        "--entrypoint", default=settings.DEFAULT_ENTRYPOINT,
        help="the command the job runs, in a working_dir holding the run config as "
        f"{settings.SUBMITTED_CONFIG_NAME} (default: %(default)s)",
    )
    p.add_argument(
        "--metrics-port", type=_port, default=None,
        help=f"serve the newest report's figures at :PORT/metrics; 0: no endpoint (default: "
        f"${settings.METRICS_PORT_ENV}, else {settings.DRIVER_METRICS_PORT})",
    )
    t = p.add_argument_group("timeouts (seconds)")
    t.add_argument("--connect-timeout", type=_seconds, default=settings.DEFAULT_CONNECT_TIMEOUT_S,
                   help="reaching the Jobs API at start (default: %(default)s)")
    t.add_argument("--request-timeout", type=_seconds, default=settings.DEFAULT_REQUEST_TIMEOUT_S,
                   help="one HTTP request (default: %(default)s)")
    t.add_argument("--submit-timeout", type=_seconds, default=settings.DEFAULT_SUBMIT_TIMEOUT_S,
                   help="submitting or finding the job, retries included (default: %(default)s)")
    t.add_argument("--lost-timeout", type=_seconds, default=settings.DEFAULT_LOST_TIMEOUT_S,
                   help="the head unreachable while following (default: %(default)s)")
    t.add_argument(
        "--stop-timeout", type=_seconds, default=None,
        help=f"after a stop request, until the job ended (default: ${settings.STOP_TIMEOUT_ENV}, "
        f"else ${settings.JOB_STOP_WAIT_ENV} (or Ray's {settings.RAY_DEFAULT_JOB_STOP_WAIT_S}) "
        f"+ {settings.STOP_SLACK_S})",
    )
    t.add_argument("--poll-interval", type=_seconds, default=settings.DEFAULT_POLL_INTERVAL_S,
                   help="between status polls (default: %(default)s)")
    t.add_argument("--report-timeout", type=_seconds, default=settings.DEFAULT_REPORT_TIMEOUT_S,
                   help="after the job ended, retrying a failed write of the trainer's terminal "
                   "report (default: %(default)s)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    """Run the driver for the parsed arguments."""
    _configure_output()
    log = logging.getLogger("grpo_trainer.driver")
    if not args.address:
        log.error("no Ray head address: pass --address or set $%s", settings.ADDRESS_ENV)
        return int(ExitCode.RETRYABLE_FAILURE)
    try:
        stop_timeout = args.stop_timeout or settings.default_stop_timeout_s(dict(os.environ))
    except ValueError as exc:
        log.error("bad stop timeout in the environment: %s", exc)
        return int(ExitCode.INVALID_INPUT)
    from grpo_operator.api.run_config import (
        IncompatibleContractError,
        RunConfig,
        RunConfigError,
    )

    config_path = Path(args.config or os.environ.get(RUN_CONFIG_ENV) or RUN_CONFIG_PATH)
    try:
        raw = config_path.read_bytes()
        config = RunConfig.from_json(raw)
    except OSError as exc:
        log.error("cannot read the run config %s: %s", config_path, exc.strerror)
        return int(ExitCode.INVALID_INPUT)
    except IncompatibleContractError as exc:  # before anything is submitted
        log.error("incompatible run config %s: %s", config_path, exc)
        return int(ExitCode.INCOMPATIBLE_CONTRACT)
    except RunConfigError as exc:
        log.error("invalid run config %s: %s", config_path, exc)
        return int(ExitCode.INVALID_INPUT)

    # Ray is imported only here: `--help` and the other subcommands do not pay for it.
    from grpo_trainer.driver.submit import Submission, Timeouts, run_submission

    # Importing Ray set its loggers to INFO: its client would log every upload and websocket.
    for name in [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "ray"]:
        logging.getLogger(name).setLevel(logging.WARNING)

    submission = Submission(
        address=args.address.rstrip("/"),
        token_file=args.token_file,
        run_name=config.run.name,
        run_uid=config.run.uid,
        attempt=config.attempt,
        config_json=raw,
        entrypoint=args.entrypoint,
        timeouts=Timeouts(
            connect=args.connect_timeout,
            request=args.request_timeout,
            submit=args.submit_timeout,
            lost=args.lost_timeout,
            stop=stop_timeout,
            poll=args.poll_interval,
        ),
    )
    from grpo_trainer.driver.relay import ReportKeyError

    try:
        relays = [_config_map_relay(config, args, log),
                  _metrics_relay(config, args.metrics_port, log)]
    except ReportKeyError as exc:
        # The operator's wiring, not the run's input, is wrong: the next attempt may have it.
        log.error("%s", exc)
        return int(ExitCode.RETRYABLE_FAILURE)
    return run_submission(submission, relays=[r for r in relays if r is not None])


def _config_map_relay(config, args: argparse.Namespace, log: logging.Logger):
    """In a pod, the trainer's reports go to the run's report ConfigMap, signed with the
    run's report key (`ReportKeyError` without one); elsewhere (no service-account token)
    they stay in the log."""
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    from grpo_trainer.driver.relay import Backoff, ConfigMapSink, ReportRelay, read_report_key

    report_key = read_report_key(os.environ.get(settings.REPORT_KEY_PATH_ENV))
    try:
        sink = ConfigMapSink(config.run.namespace, config.report_config_map, config.report_key,
                             report_key, request_timeout=args.request_timeout)
        return ReportRelay(sink, sink.stored_cursor(config.attempt), attempt=config.attempt,
                           terminal_retry=Backoff(timeout=args.report_timeout))
    except Exception as exc:  # reports are worth having, not worth failing the run for
        log.warning("reports will not reach the report ConfigMap: %s", exc)
        return None


def _metrics_relay(config, port: int | None, log: logging.Logger):
    """The newest report's figures at ``/metrics``, unless the port is 0 or cannot be bound.
    Its relay starts without a cursor: a restarted driver replaying the log shows the newest
    report at once, even one the ConfigMap already holds."""
    if port is None:
        try:
            port = settings.default_metrics_port(dict(os.environ))
        except ValueError as exc:
            log.warning("not serving metrics: $%s: %s", settings.METRICS_PORT_ENV, exc)
            return None
    if port == 0:
        return None
    from grpo_trainer.driver.metrics import ReportGauges, serve
    from grpo_trainer.driver.relay import ReportRelay

    gauges = ReportGauges(config.run.namespace, config.run.name)
    address = settings.metrics_address(dict(os.environ))
    if serve(gauges, port, address) is None:
        return None
    log.info("serving the trainer's report figures at %s:%d/metrics", address, port)
    return ReportRelay(gauges)


def _configure_output() -> None:
    # The job's log goes to stdout as is; the driver's own messages go to stderr.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure:
            reconfigure(errors="backslashreplace", line_buffering=True)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO,
        format="%(asctime)s grpo-driver %(levelname)s %(message)s",
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _port(text: str) -> int:
    try:
        return settings.parse_port(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number (0-65535), got {text}") from None


def _path_or_none(text: str | None) -> Path | None:
    return Path(text) if text else None
