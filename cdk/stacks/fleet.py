"""Fleet stack: an isolated VPC (no internet route, VPC endpoints for every service the workers call)
and one Auto Scaling group per hardware class, each with its own launch template and instance role.

The planner owns the desired capacity (the template sets only min 0 / max), so a deploy never
resets a running fleet. Each instance runs the instance agent (``python -m workers.instance``,
cdk/userdata.py) with the ONNX models built by ``skinflint models build`` (an S3 asset unpacked to
``/opt/skinflint/models``); its role allows what the agent and the workers it runs call and reading
its own code, wheel and model archives, nothing more. A
scale-in holds the instance in Terminating:Wait (lifecycle hook) until the agent has drained and
completed the action, or until the hook's heartbeat timeout."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_cdk import Annotations, CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_autoscaling_hooktargets as hooktargets
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets

from cdk import constants as C
from cdk.assets import (
    MODEL_ASSET_EXCLUDE,
    missing_demo_models,
    model_files,
    stage_packages,
)
from cdk.deps import read_manifest
from cdk.nag import acknowledge
from cdk.policies import cdk_queue_arns, list_bucket_statement, queues_arn
from cdk.userdata import BOOT_FAILED_MARK, WorkerBoot, worker_boot_commands, worker_boot_prelude

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from aws_cdk import aws_dynamodb as ddb
    from aws_cdk import aws_s3 as s3
    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

    from cdk.config import HardwareClass

__all__ = ["FleetStack", "FleetStackProps"]


@dataclass(frozen=True)
class FleetStackProps:
    hardware: tuple[HardwareClass, ...]
    spot: bool
    config_table: ddb.ITable
    results_table: ddb.ITable
    bucket: s3.IBucket
    fleet_events: sqs.IQueue
    models_dir: Path | None = None  # ``<model>.onnx`` files shipped to every instance; None: emulated
    max_instances: Mapping[str, int] = field(default_factory=dict)  # class -> ASG MaxSize (-c max_instances)
    wheels_dir: Path = C.WORKER_WHEELS_DIR  # <kind>/: the wheelhouses of python -m cdk.deps worker


class FleetStack(Stack):
    """``vpc``, ``groups`` (hardware class -> Auto Scaling group), ``worker_sg``, ``models`` (the
    models asset, None without models)."""

    def __init__(self, scope: Construct, construct_id: str, props: FleetStackProps, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.props = props
        self.vpc = self._vpc()
        self.worker_sg = ec2.SecurityGroup(
            self,
            "WorkerSg",
            vpc=self.vpc,
            description="Skinflint workers: no ingress; HTTPS out to the VPC endpoints only",
            allow_all_outbound=False,
        )
        # S3 and DynamoDB gateway endpoints are reached at the services' public addresses through
        # the route table, so egress is HTTPS to anywhere; the subnets have no internet route at all.
        self.worker_sg.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to the VPC endpoints (no internet route exists)"
        )
        for endpoint in self._interface_endpoints:  # only the workers may reach the endpoints
            endpoint.connections.allow_default_port_from(self.worker_sg, "HTTPS from the workers")
        self.log_group = logs.LogGroup(
            self,
            "WorkerLogs",
            log_group_name=C.WORKER_LOG_GROUP,
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # a failed boot logs SKINFLINT_BOOT_FAILED (cdk/userdata.py) to this group: counted, alarmed
        self.boot_failures = logs.MetricFilter(
            self,
            "BootFailures",
            log_group=self.log_group,
            filter_pattern=logs.FilterPattern.literal(f'"{BOOT_FAILED_MARK}"'),
            metric_namespace=C.METRICS_NAMESPACE,
            metric_name=C.BOOT_FAILURES_METRIC,
            metric_value="1",
            default_value=0,
        )
        kinds = sorted({hw.kind for hw in props.hardware})
        requirements = {
            f"requirements-{kind}.txt": "\n".join((*C.WORKER_REQUIREMENTS, C.WORKER_RUNTIME[kind])) + "\n"
            for kind in kinds
        }
        self.code = s3_assets.Asset(
            self, "WorkerCode", path=str(stage_packages("worker", C.WORKER_PACKAGES, requirements))
        )
        # one wheelhouse per hardware kind (python -m cdk.deps worker): installed offline at boot
        self.wheels: dict[str, s3_assets.Asset] = {}
        for kind in kinds:
            if read_manifest(kind, props.wheels_dir) is None:
                Annotations.of(self).add_warning_v2(
                    f"skinflint:worker-wheels-{kind}",
                    f"no {kind} wheelhouse for CPython {C.WORKER_PYTHON} in {props.wheels_dir / kind}: "
                    f"{kind} instances would fail their boot (ABANDON); run `python -m cdk.deps worker` "
                    "before `cdk deploy`",
                )
                continue
            self.wheels[kind] = s3_assets.Asset(
                self, f"WorkerWheels-{kind}", path=str(props.wheels_dir / kind)
            )
        self.models = self._models(props.models_dir)
        self.groups: dict[str, autoscaling.AutoScalingGroup] = {}
        for hw in props.hardware:
            self.groups[hw.name] = self._group(hw)

    def _models(self, models_dir: Path | None) -> s3_assets.Asset | None:
        """The models archive (``-c models``), and an output and a synth message saying what ships."""
        if models_dir is None:
            Annotations.of(self).add_warning_v2(
                "skinflint:models",
                "deploying without models (-c models=none): every share runs emulated (its results say "
                '"emulated": true); run `skinflint models build` and deploy again to serve for real',
            )
            CfnOutput(
                self, "Models", value="none: every share runs emulated", description="ONNX models shipped"
            )
            return None
        files = model_files(models_dir)
        asset = s3_assets.Asset(self, "WorkerModels", path=str(models_dir), exclude=list(MODEL_ASSET_EXCLUDE))
        missing = missing_demo_models(models_dir)
        if missing:
            Annotations.of(self).add_warning_v2(
                "skinflint:models-missing",
                f"{models_dir} lacks {', '.join(missing)} (demo models not built): shares of those run "
                "emulated; `skinflint models build` builds every demo app's models",
            )
        names = ",".join(path.name.removesuffix(C.MODEL_SUFFIX) for path in files)
        CfnOutput(self, "Models", value=names, description=f"ONNX models shipped to {C.WORKER_MODEL_DIR}")
        return asset

    # -- network ---------------------------------------------------------------------------------
    def _vpc(self) -> ec2.Vpc:
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(C.VPC_CIDR),
            max_azs=C.MAX_AZS,
            nat_gateways=0,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="workers",
                    subnet_type=ec2.SubnetType.PRIVATE_ISOLATED,
                    cidr_mask=C.PRIVATE_SUBNET_MASK,
                )
            ],
            restrict_default_security_group=True,
        )
        flow_logs = logs.LogGroup(
            self, "FlowLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs))
        subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        self._interface_endpoints: list[ec2.InterfaceVpcEndpoint] = []
        self._s3_gw = vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[subnets]
        )
        self._ddb_gw = vpc.add_gateway_endpoint(
            "Ddb", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB, subnets=[subnets]
        )
        # no CloudWatch monitoring endpoint: the instances write their metrics as EMF lines to their
        # log (cdk/userdata.py), which the Logs endpoint carries; an interface endpoint bills per AZ-hour
        for cid, service in (
            ("Sqs", ec2.InterfaceVpcEndpointAwsService.SQS),
            ("Logs", ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS),
            ("AutoScaling", ec2.InterfaceVpcEndpointAwsService.AUTOSCALING),
        ):
            self._interface_endpoints.append(
                vpc.add_interface_endpoint(
                    cid, service=service, subnets=subnets, private_dns_enabled=True, open=False
                )
            )
        return vpc

    # -- one hardware class ----------------------------------------------------------------------
    def _role(self, hw: HardwareClass) -> iam.Role:
        props, region, account, part = self.props, self.region, self.account, self.partition
        role = iam.Role(
            self,
            f"Role-{hw.slug}",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"Skinflint {hw.name} workers: their queues, tables, frames and metrics only",
        )
        asg = (
            f"arn:{part}:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/{hw.asg_name}"
        )
        queue_actions = [
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",  # DeleteMessageBatch
            "sqs:ChangeMessageVisibility",  # ChangeMessageVisibilityBatch: release on drain
            "sqs:SendMessage",  # SendMessageBatch: children to the downstream modules' queues
            "sqs:GetQueueAttributes",  # depth: an old version's queue retires once empty
        ]
        statements = [
            # plan pointer, version documents (BatchGetItem), claims, registered app index
            iam.PolicyStatement(
                sid="PlanRead",
                actions=["dynamodb:GetItem", "dynamodb:BatchGetItem"],
                resources=[props.config_table.table_arn],
            ),
            # slot claims (conditional put, conditional delete on release) and heartbeats, only
            iam.PolicyStatement(
                sid="ClaimsAndHeartbeats",
                actions=["dynamodb:PutItem", "dynamodb:DeleteItem"],
                resources=[props.config_table.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(C.WORKER_CONFIG_KEYS)}},
            ),
            # terminal tasks' records (one item per batch and POST); a redelivery reads its POST first
            iam.PolicyStatement(
                sid="Results",
                actions=["dynamodb:BatchWriteItem", "dynamodb:Query"],
                resources=[props.results_table.table_arn],
            ),
            iam.PolicyStatement(
                sid="TaskQueues", actions=queue_actions, resources=[queues_arn(part, account, region)]
            ),
            iam.PolicyStatement(
                sid="NotTheStackQueues",
                effect=iam.Effect.DENY,
                actions=queue_actions,
                resources=cdk_queue_arns(part, account, region),
            ),
            iam.PolicyStatement(
                sid="FramesIn",
                actions=["s3:GetObject"],
                resources=[
                    C.frames_bucket_arn(part, account, region, f"{C.FRAMES_PREFIX}*"),
                    C.frames_bucket_arn(part, account, region, f"{C.REGISTRY_PREFIX}*"),
                ],
            ),
            # large task outputs; children's crops too large to travel inline (workers/crops.py)
            iam.PolicyStatement(
                sid="OutputsOut",
                actions=["s3:PutObject"],
                resources=[
                    C.frames_bucket_arn(part, account, region, f"{C.OUTPUTS_PREFIX}*"),
                    C.frames_bucket_arn(part, account, region, f"{C.FRAMES_PREFIX}*"),
                ],
            ),
            # the profile store: an instance measures the models planned on its class before it claims
            # (workers/onsite.py) and writes them there for the planner's next epoch
            iam.PolicyStatement(
                sid="ProfilesMeasured",
                actions=["s3:GetObject", "s3:PutObject"],
                resources=[C.frames_bucket_arn(part, account, region, f"{C.PROFILES_PREFIX}*")],
            ),
            list_bucket_statement(part, account, region),
            # no cloudwatch:PutMetricData: the agent writes its metrics as Embedded Metric Format lines
            # to its log (SKINFLINT_METRICS_SINK=emf, cdk/userdata.py), which the Logs statement ships
            # the drain and boot hooks' completions; a failed boot check marks its instance unhealthy
            iam.PolicyStatement(
                sid="Lifecycle",
                actions=["autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceHealth"],
                resources=[asg],
            ),
            iam.PolicyStatement(
                sid="Logs",
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[self.log_group.log_group_arn],
            ),
            iam.PolicyStatement(
                sid="Code",
                actions=["s3:GetObject"],
                resources=[
                    asset.bucket.arn_for_objects(asset.s3_object_key)
                    for asset in (self.code, self.wheels.get(hw.kind))
                    if asset is not None
                ],
            ),
        ]
        if self.models is not None:  # the models archive only, not the rest of the assets bucket
            statements.append(
                iam.PolicyStatement(
                    sid="Models",
                    actions=["s3:GetObject"],
                    resources=[self.models.bucket.arn_for_objects(self.models.s3_object_key)],
                )
            )
        policy = iam.Policy(self, f"Policy-{hw.slug}", statements=statements)
        role.attach_inline_policy(policy)
        self._acknowledge_policy(policy, hw)
        return role

    def _acknowledge_policy(self, policy: iam.Policy, hw: HardwareClass) -> None:
        region, account, part = self.region, self.account, self.partition
        reasons = {
            f"Resource::{queues_arn(part, account, region)}": (
                "Task queues are created at run time by the planner, one per planned machine, all named "
                f"{C.QUEUE_NAME_PREFIX}<app>-...; the name prefix is the narrowest stable scope (the "
                "stack's own queues are denied)."
            ),
            f"Resource::arn:{part}:autoscaling:{region}:{account}:autoScalingGroup:*:"
            f"autoScalingGroupName/{hw.asg_name}": (
                "An Auto Scaling group ARN embeds a generated id; the name pins it to this class's group."
            ),
            f"Resource::{C.frames_bucket_arn(part, account, region, C.FRAMES_PREFIX)}*": (
                "Workers read the frames the front spilled to S3 and write their children's crops too "
                "large for SQS (frames/<request id>/<task>); object keys are request ids."
            ),
            f"Resource::{C.frames_bucket_arn(part, account, region, C.REGISTRY_PREFIX)}*": (
                "The agent reads the registered spec of each app it serves (model names, profiles) under "
                "registry/apps/<app>/r<revision>.json."
            ),
            f"Resource::{C.frames_bucket_arn(part, account, region, C.OUTPUTS_PREFIX)}*": (
                "Workers write task outputs too large for DynamoDB; object keys are request ids."
            ),
            f"Resource::{C.frames_bucket_arn(part, account, region, C.PROFILES_PREFIX)}*": (
                "An instance measures the models planned on its class before it claims a slot and "
                "writes them to the profile store, profiles/data/<model>.json (workers/onsite.py); it "
                "reads the catalog override profiles/hardware.json."
            ),
        }
        for finding, reason in reasons.items():
            acknowledge(policy, f"AwsSolutions-IAM5[{finding}]", reason)

    def _group(self, hw: HardwareClass) -> autoscaling.AutoScalingGroup:
        props = self.props
        role = self._role(hw)
        user_data = ec2.UserData.for_linux()
        # first, before the downloads (they may fail): strict mode and the boot-failure trap
        user_data.add_commands(*worker_boot_prelude(hw.name, self.region, hw.asg_name))
        wheels = self.wheels.get(hw.kind)
        code_zip = user_data.add_s3_download_command(
            bucket=self.code.bucket, bucket_key=self.code.s3_object_key
        )
        wheels_zip = (
            user_data.add_s3_download_command(bucket=wheels.bucket, bucket_key=wheels.s3_object_key)
            if wheels
            else None
        )
        models_zip = (
            user_data.add_s3_download_command(
                bucket=self.models.bucket,
                bucket_key=self.models.s3_object_key,
                local_file=f"{C.WORKER_MODEL_DIR}.zip",
            )
            if self.models
            else None
        )
        boot = WorkerBoot(
            hardware=hw.name,
            kind=hw.kind,
            region=self.region,
            asg_name=hw.asg_name,
            code_zip=code_zip,
            wheels_zip=wheels_zip,
            models_zip=models_zip,
            config_table=props.config_table.table_name,
            results_table=props.results_table.table_name,
            bucket=props.bucket.bucket_name,
        )
        user_data.add_commands(*worker_boot_commands(boot))
        ami = C.GPU_AMI_PARAMETER if hw.kind == "gpu" else C.CPU_AMI_PARAMETER
        if hw.kind == "gpu" and hw.instance_type.split(".")[0] in C.GPU_AMI_UNSUPPORTED_FAMILIES:
            Annotations.of(self).add_warning_v2(
                f"skinflint:gpu-ami-{hw.slug}",
                f"{hw.name} ({hw.instance_type}): the GPU AMI ({C.GPU_AMI_PARAMETER}) ships NVIDIA's open "
                "kernel modules, which do not drive Volta (P3); its instances fail the boot check "
                "(no GPU visible) and are abandoned. See docs/deploy.md, GPU AMIs and runtimes.",
            )
        template = ec2.LaunchTemplate(
            self,
            f"Template-{hw.slug}",
            instance_type=ec2.InstanceType(hw.instance_type),
            machine_image=ec2.MachineImage.from_ssm_parameter(ami, os=ec2.OperatingSystemType.LINUX),
            role=role,
            security_group=self.worker_sg,
            user_data=user_data,
            require_imdsv2=True,
            http_put_response_hop_limit=1,
            associate_public_ip_address=False,
            detailed_monitoring=True,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        C.ROOT_VOLUME_GIB,
                        encrypted=True,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        delete_on_termination=True,
                    ),
                )
            ],
        )
        common: dict[str, Any] = {
            "vpc": self.vpc,
            "vpc_subnets": ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED),
            "auto_scaling_group_name": hw.asg_name,
            "min_capacity": 0,
            "max_capacity": props.max_instances.get(hw.name, C.ASG_MAX_INSTANCES),
            "group_metrics": [
                autoscaling.GroupMetrics(
                    autoscaling.GroupMetric.IN_SERVICE_INSTANCES,
                    autoscaling.GroupMetric.DESIRED_CAPACITY,
                    autoscaling.GroupMetric.TERMINATING_INSTANCES,
                )
            ],
        }
        if props.spot:
            group = autoscaling.AutoScalingGroup(
                self,
                f"Group-{hw.slug}",
                mixed_instances_policy=autoscaling.MixedInstancesPolicy(
                    launch_template=template,
                    instances_distribution=autoscaling.InstancesDistribution(
                        on_demand_base_capacity=0,
                        on_demand_percentage_above_base_capacity=0,
                        spot_allocation_strategy=autoscaling.SpotAllocationStrategy.PRICE_CAPACITY_OPTIMIZED,
                    ),
                    launch_template_overrides=[
                        autoscaling.LaunchTemplateOverrides(instance_type=ec2.InstanceType(hw.instance_type))
                    ],
                ),
                capacity_rebalance=True,
                **common,
            )
            acknowledge(
                group,
                "AwsSolutions-EC26",
                "cdk-nag 3.0.2's EC26 rule throws on a MixedInstancesPolicy launch template (it reads "
                "launchTemplateName); the template's root volume is encrypted (asserted in tests/infra).",
            )
        else:
            group = autoscaling.AutoScalingGroup(self, f"Group-{hw.slug}", launch_template=template, **common)
        group.add_lifecycle_hook(
            "Boot",
            lifecycle_hook_name=C.BOOT_HOOK_NAME,
            lifecycle_transition=autoscaling.LifecycleTransition.INSTANCE_LAUNCHING,
            heartbeat_timeout=Duration.seconds(C.BOOT_HEARTBEAT_S),
            default_result=autoscaling.DefaultResult.ABANDON,
        )
        group.add_lifecycle_hook(
            "Drain",
            lifecycle_hook_name=C.DRAIN_HOOK_NAME,
            lifecycle_transition=autoscaling.LifecycleTransition.INSTANCE_TERMINATING,
            heartbeat_timeout=Duration.seconds(C.DRAIN_HEARTBEAT_S),
            default_result=autoscaling.DefaultResult.CONTINUE,
            notification_target=hooktargets.QueueHook(props.fleet_events),
        )
        acknowledge(
            group,
            "AwsSolutions-AS3",
            "Scale events reach the planner through the drain lifecycle hook (SQS fleet-events queue) "
            "and the group metrics; an SNS notification topic would duplicate them.",
        )
        return group
