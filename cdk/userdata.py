"""The worker's boot script: install the code, its kind's wheelhouse (offline) and the ONNX models,
check that the class's execution provider loads (and, for GPU classes, that the GPU is visible), then
run the instance agent (``python -m workers.instance``: claims a slot of the current plan version and
runs its shares) as a systemd service and let the instance go InService (launch lifecycle hook,
CONTINUE). Any failing command fails the boot: ABANDON, and a ``SKINFLINT_BOOT_FAILED`` log line that
an alarm counts. The agent watches IMDS itself for the termination lifecycle hook and Spot
interruption notices, drains, and completes the lifecycle action. Values may be CloudFormation
tokens (table names, bucket)."""

from __future__ import annotations

from dataclasses import dataclass

from cdk import constants as C

__all__ = ["BOOT_FAILED_MARK", "PROVIDER", "WorkerBoot", "worker_boot_commands", "worker_boot_prelude"]

_IMDS = "http://169.254.169.254/latest"


@dataclass(frozen=True)
class WorkerBoot:
    hardware: str  # catalog class, e.g. "t4"
    kind: str  # "gpu" | "cpu"
    region: str
    asg_name: str
    code_zip: str  # local path the code archive was downloaded to
    wheels_zip: str | None  # local path of the kind's wheelhouse archive, None when not built
    models_zip: str | None  # local path of the models archive, None with -c models=none
    config_table: str
    results_table: str
    bucket: str


# the execution provider a class's agent must load (workers.instance --boot-check): never a silent
# CPU fallback on a GPU class, whose plan assumes GPU timings
PROVIDER = {"gpu": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}
BOOT_FAILED_MARK = "SKINFLINT_BOOT_FAILED"  # the boot log line the boot-failure metric filter counts


def worker_boot_prelude(hardware: str, region: str, asg_name: str) -> list[str]:
    """The first commands of the user data (before the archives download): strict mode, the instance
    id, and the trap that turns any failing command into a failed boot. A failed boot logs
    ``SKINFLINT_BOOT_FAILED`` to the worker log group (a metric filter and an alarm count it) and
    completes the launch lifecycle action with ABANDON, so Auto Scaling terminates the instance
    instead of billing one that serves nothing (without a completion the hook's heartbeat timeout
    abandons it too)."""
    hook, asg, group = C.BOOT_HOOK_NAME, asg_name, C.WORKER_LOG_GROUP
    token = f'$(curl -sS -X PUT {_IMDS}/api/token -H "X-aws-ec2-metadata-token-ttl-seconds: 300")'
    return [
        "set -euo pipefail",
        "exec > >(tee -a /var/log/skinflint-boot.log) 2>&1",
        f"export AWS_DEFAULT_REGION={region}",
        f"TOKEN={token}",
        f'INSTANCE_ID=$(curl -sS -H "X-aws-ec2-metadata-token: $TOKEN" {_IMDS}/meta-data/instance-id)',
        "boot_failed() {",
        "  trap - ERR",
        f'  echo "{BOOT_FAILED_MARK} instance=$INSTANCE_ID hardware={hardware} reason=$1"',
        f"  aws logs create-log-stream --log-group-name {group}"
        ' --log-stream-name "boot/$INSTANCE_ID" || true',
        "  R=$(printf %s \"$1\" | tr -c '[:alnum:]._/=: -' _)",
        f'  aws logs put-log-events --log-group-name {group} --log-stream-name "boot/$INSTANCE_ID"'
        ' --log-events "[{\\"timestamp\\": $(date +%s000), \\"message\\":'
        f' \\"{BOOT_FAILED_MARK} hardware={hardware} reason=$R\\"}}]" || true',
        f"  aws autoscaling complete-lifecycle-action --lifecycle-hook-name {hook}"
        f' --auto-scaling-group-name {asg} --instance-id "$INSTANCE_ID" --lifecycle-action-result ABANDON'
        " || true",
        "  exit 1",
        "}",
        "trap 'boot_failed \"line $LINENO: $BASH_COMMAND\"' ERR",
    ]


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
        "SKINFLINT_REQUIRE_PROVIDER": PROVIDER[boot.kind],
        "SKINFLINT_ASG_NAME": boot.asg_name,
        "SKINFLINT_DRAIN_HOOK": C.DRAIN_HOOK_NAME,
        # <model>.onnx; a share whose model file is not there runs emulated (its results say so)
        "SKINFLINT_MODEL_DIR": C.WORKER_MODEL_DIR,
        "PYTHONPATH": "/opt/skinflint/app",
        "PYTHONUNBUFFERED": "1",
    }
    return [f"echo '{key}={value}' >> /etc/skinflint/worker.env" for key, value in env.items()]


def worker_boot_commands(boot: WorkerBoot) -> list[str]:
    """Shell commands appended to the launch template's user data (Amazon Linux 2023), after the
    prelude (``worker_boot_prelude``) and the archives' downloads."""
    py = f"python{C.WORKER_PYTHON}"
    req = f"/opt/skinflint/app/requirements-{boot.kind}.txt"
    if boot.wheels_zip:  # the subnets reach no package index: the wheelhouse or nothing
        install = [
            f"unzip -q -o {boot.wheels_zip} -d /opt/skinflint/wheels",
            f"/opt/skinflint/venv/bin/pip install --no-index --find-links /opt/skinflint/wheels -r {req}",
        ]
    else:
        install = [f'boot_failed "no {boot.kind} wheelhouse shipped: run python -m cdk.deps worker"']
    # the archive is downloaded beside its directory (not to /tmp, a tmpfs on AL2023) and removed once
    # unpacked; a re-run of the script replaces the models (unzip -o)
    models = (
        [f"unzip -q -o {boot.models_zip} -d {C.WORKER_MODEL_DIR}", f"rm -f {boot.models_zip}"]
        if boot.models_zip
        else []
    )
    # GPU classes: onnxruntime-gpu's CUDA 12 provider links the AMI's CUDA 12 and cuDNN 9 libraries
    cuda = (
        [
            "CUDA_HOME=$( (ls -d /usr/local/cuda-12.* 2>/dev/null || true) | sort -V | tail -n 1)",
            '[ -n "$CUDA_HOME" ] || boot_failed "no CUDA 12 toolkit under /usr/local on this AMI"',
            'echo "LD_LIBRARY_PATH=$CUDA_HOME/lib64:$CUDA_HOME/lib:$CUDA_HOME/targets/x86_64-linux/lib"'
            " >> /etc/skinflint/worker.env",
        ]
        if boot.kind == "gpu"
        else []
    )
    check = (
        "set -a; . /etc/skinflint/worker.env; set +a; /opt/skinflint/venv/bin/python -m workers.instance"
        f" --hardware {boot.hardware} --instance-id $INSTANCE_ID --boot-check"
    )
    return [
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
        'echo "SKINFLINT_INSTANCE_ID=$INSTANCE_ID" >> /etc/skinflint/worker.env',
        *cuda,
        # the execution provider loads and (GPU) the GPU is visible, or the boot fails (ABANDON)
        check,
        "cat > /etc/systemd/system/skinflint-worker.service <<'UNIT'",
        "[Unit]",
        "Description=Skinflint instance agent (python -m workers.instance)",
        "After=network-online.target",
        "Wants=network-online.target",
        "[Service]",
        f"User={C.WORKER_USER}",
        "EnvironmentFile=/etc/skinflint/worker.env",
        "WorkingDirectory=/opt/skinflint/app",
        # /var/lib/skinflint ($STATE_DIRECTORY): the receipts the workers hold (workers/receipts.py),
        # released by the agent restarted after a crash instead of waiting out the visibility timeout
        "StateDirectory=skinflint",
        "ExecStart=/opt/skinflint/venv/bin/python -m workers.instance"
        " --hardware ${SKINFLINT_HARDWARE} --instance-id ${SKINFLINT_INSTANCE_ID}"
        f" --lifecycle-poll-s {C.DRAIN_POLL_S}",
        # SIGTERM drains (finish the batch in hand, release the rest, release the slot claim)
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={C.DRAIN_HEARTBEAT_S // 2}",
        # exit 0 after a drain (scale-in, Spot): not restarted; a crash is; a failed boot check
        # (exit 3: the agent marked the instance unhealthy, Auto Scaling replaces it) is not
        "Restart=on-failure",
        f"RestartPreventExitStatus={C.BOOT_CHECK_EXIT}",
        # a restarted agent releases what the crashed one held (workers/receipts.py): the sooner it
        # starts, the sooner the front's backlog check stops counting those messages
        "RestartSec=3",
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
        # booted: the instance may go InService
        "trap - ERR",
        f"aws autoscaling complete-lifecycle-action --lifecycle-hook-name {C.BOOT_HOOK_NAME}"
        f' --auto-scaling-group-name {boot.asg_name} --instance-id "$INSTANCE_ID"'
        " --lifecycle-action-result CONTINUE",
    ]
