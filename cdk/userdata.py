"""The worker's boot script: install the code, its wheels and the ONNX models, then run the instance agent
(``python -m workers.instance``: claims a slot of the current plan version and runs its shares)
as a systemd service. The agent watches IMDS itself for the termination lifecycle hook and Spot
interruption notices, drains, and completes the lifecycle action. Values may be CloudFormation
tokens (table names, bucket)."""

from __future__ import annotations

from dataclasses import dataclass

from cdk import constants as C

__all__ = ["WorkerBoot", "worker_boot_commands"]

_IMDS = "http://169.254.169.254/latest"


@dataclass(frozen=True)
class WorkerBoot:
    hardware: str  # catalog class, e.g. "t4"
    kind: str  # "gpu" | "cpu"
    region: str
    asg_name: str
    code_zip: str  # local path the code archive was downloaded to
    wheels_zip: str | None  # local path of the wheelhouse archive, None when not built
    models_zip: str | None  # local path of the models archive, None with -c models=none
    config_table: str
    results_table: str
    bucket: str


def _env_lines(boot: WorkerBoot) -> list[str]:
    env = {
        "AWS_DEFAULT_REGION": boot.region,
        "SKINFLINT_CONFIG_TABLE": boot.config_table,
        "SKINFLINT_RESULTS_TABLE": boot.results_table,
        "SKINFLINT_RESULTS_RETENTION_DAYS": str(C.RESULTS_RETENTION_DAYS),
        "SKINFLINT_BUCKET": boot.bucket,
        "SKINFLINT_METRICS_NAMESPACE": C.METRICS_NAMESPACE,
        # metrics as Embedded Metric Format lines on stdout (worker.log, shipped by the CloudWatch
        # agent; CloudWatch Logs extracts them): no PutMetricData call, billed as log ingestion
        "SKINFLINT_METRICS_SINK": "emf",
        # one bucket per minute: CloudWatch keeps these standard-resolution metrics per minute anyway,
        # and each 5 s flush then writes one timestamp's lines instead of five
        "SKINFLINT_METRICS_RESOLUTION_S": str(C.WORKER_METRICS_RESOLUTION_S),
        "SKINFLINT_HARDWARE": boot.hardware,
        "SKINFLINT_ASG_NAME": boot.asg_name,
        "SKINFLINT_DRAIN_HOOK": C.DRAIN_HOOK_NAME,
        # <model>.onnx; a share whose model file is not there runs emulated (its results say so)
        "SKINFLINT_MODEL_DIR": C.WORKER_MODEL_DIR,
        "PYTHONPATH": "/opt/skinflint/app",
        "PYTHONUNBUFFERED": "1",
    }
    return [f"echo '{key}={value}' >> /etc/skinflint/worker.env" for key, value in env.items()]


def worker_boot_commands(boot: WorkerBoot) -> list[str]:
    """Shell commands appended to the launch template's user data (Amazon Linux 2023)."""
    py = f"python{C.WORKER_PYTHON}"
    req = f"/opt/skinflint/app/requirements-{boot.kind}.txt"
    if boot.wheels_zip:
        install = [
            f"unzip -q -o {boot.wheels_zip} -d /opt/skinflint/wheels",
            f"/opt/skinflint/venv/bin/pip install --no-index --find-links /opt/skinflint/wheels -r {req}",
        ]
    else:  # no wheelhouse was built: PyPI must be reachable (it is not from the isolated subnets)
        install = [f"/opt/skinflint/venv/bin/pip install -r {req}"]
    # the archive is downloaded beside its directory (not to /tmp, a tmpfs on AL2023) and removed once
    # unpacked; a re-run of the script replaces the models (unzip -o)
    models = (
        [f"unzip -q -o {boot.models_zip} -d {C.WORKER_MODEL_DIR}", f"rm -f {boot.models_zip}"]
        if boot.models_zip
        else []
    )
    token = f'TOKEN=$(curl -sS -X PUT {_IMDS}/api/token -H "X-aws-ec2-metadata-token-ttl-seconds: 300")'
    return [
        "set -euo pipefail",
        "exec > >(tee -a /var/log/skinflint-boot.log) 2>&1",
        f"dnf install -y {py} {py}-pip unzip amazon-cloudwatch-agent logrotate",
        f"id -u {C.WORKER_USER} >/dev/null 2>&1 || useradd --system -d /opt/skinflint {C.WORKER_USER}",
        f"install -d -m 0755 /opt/skinflint /opt/skinflint/app {C.WORKER_MODEL_DIR} /etc/skinflint",
        f"install -d -m 0755 -o {C.WORKER_USER} /var/log/skinflint",
        f"unzip -q -o {boot.code_zip} -d /opt/skinflint/app",
        *models,
        f"{py} -m venv /opt/skinflint/venv",
        *install,
        ": > /etc/skinflint/worker.env",
        *_env_lines(boot),
        token,
        f'INSTANCE_ID=$(curl -sS -H "X-aws-ec2-metadata-token: $TOKEN" {_IMDS}/meta-data/instance-id)',
        'echo "SKINFLINT_INSTANCE_ID=$INSTANCE_ID" >> /etc/skinflint/worker.env',
        "cat > /etc/systemd/system/skinflint-worker.service <<'UNIT'",
        "[Unit]",
        "Description=Skinflint instance agent (python -m workers.instance)",
        "After=network-online.target",
        "Wants=network-online.target",
        "[Service]",
        f"User={C.WORKER_USER}",
        "EnvironmentFile=/etc/skinflint/worker.env",
        "WorkingDirectory=/opt/skinflint/app",
        "ExecStart=/opt/skinflint/venv/bin/python -m workers.instance"
        " --hardware ${SKINFLINT_HARDWARE} --instance-id ${SKINFLINT_INSTANCE_ID}"
        f" --lifecycle-poll-s {C.DRAIN_POLL_S}",
        # SIGTERM drains (finish the batch in hand, release the rest, release the slot claim)
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={C.DRAIN_HEARTBEAT_S // 2}",
        # exit 0 after a drain (scale-in, Spot): not restarted; a crash is
        "Restart=on-failure",
        "RestartSec=15",
        "StandardOutput=append:/var/log/skinflint/worker.log",
        "StandardError=append:/var/log/skinflint/worker.log",
        "[Install]",
        "WantedBy=multi-user.target",
        "UNIT",
        "cat > /opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json <<'CWA'",
        '{"logs": {"logs_collected": {"files": {"collect_list": ['
        '{"file_path": "/var/log/skinflint/worker.log",'
        f' "log_group_name": "{C.WORKER_LOG_GROUP}", "log_stream_name": "{{instance_id}}"}}]}}}}}}}}',
        "CWA",
        "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s"
        " -c file:/opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json",
        # the agent's log also carries its metrics (EMF lines, a few MB a day): rotated in place (the
        # CloudWatch agent follows a truncated file), so the root volume never fills
        "cat > /etc/logrotate.d/skinflint <<'ROT'",
        "/var/log/skinflint/worker.log {",
        f"  daily\n  maxsize {C.WORKER_LOG_MAX_MB}M\n  rotate 3\n  compress\n  delaycompress",
        "  missingok\n  notifempty\n  copytruncate\n}",
        "ROT",
        # never fail the boot (set -e) for the rotation: the worker must start either way
        "systemctl enable --now logrotate.timer || echo 'no logrotate.timer: worker.log not rotated'",
        "systemctl daemon-reload",
        "systemctl enable --now skinflint-worker.service",
    ]
