"""Audits of a deployed admission chain: each check reads records and reports findings.

Every finding says what it saw, why it matters and the fix (a command or a patch). A check is a pure function of
the records read, so it runs the same on a live cluster and on a dump.

One module per concern, each depending only on ``records``:

- ``records``: ``Finding``, the records of the objects the checks read (webhook configurations, Kueue's
  Configuration, the leader Lease, the operator's Deployment) and their parsers, the probes' results, and the words
  findings share;
- ``kueue``: the AdmissionCheck, the queues that reference it, Kueue's Configuration and the TAS topologies;
- ``pools``: each pool's queue and published status, inactive pools, orphaned ledgers, stuck and undrained work;
- ``webhooks``: the deployed configurations against the registry, and the probes of a live operator;
- ``health``: the operator's Deployment, Lease and metrics.
"""

from gpuctl.core.doctor.health import (
    histogram_quantile,
    operator_health,
)
from gpuctl.core.doctor.kueue import (
    KUEUE_GATES_WANTED,
    admission_check,
    kueue_configuration,
    kueue_topologies,
    queues,
    versions,
)
from gpuctl.core.doctor.pools import (
    INACTIVE_GRACE_SECONDS,
    drain_stopped,
    inactive_pools,
    orphaned_devices,
    placement_loops,
    pools,
    stuck,
    unreadable_cards,
)
from gpuctl.core.doctor.records import (
    FAIL,
    INSTALL,
    KUEUE_GATE_DEFAULTS,
    OK,
    RETRY_MINUTES,
    WARN,
    DeploymentRecord,
    EndpointProbe,
    Finding,
    KueueConfigError,
    KueueSettings,
    LeaseRecord,
    LiveReview,
    ReviewProbe,
    Rule,
    Transformation,
    WebhookEntry,
    compact_json,
    duration_text,
    feature_gate_flag,
    field_map,
    operator_fix,
    parse_deployment,
    parse_kueue_settings,
    parse_lease,
    parse_rule,
    parse_transformations,
    parse_webhook_configuration,
    shell_word,
    show,
    url_base,
)
from gpuctl.core.doctor.webhooks import (
    PROBE_NAME,
    ca_bundle_fix,
    endpoints,
    entry_fix,
    live_reviews,
    review_probes,
    webhooks,
)

__all__ = [
    "FAIL",
    "INACTIVE_GRACE_SECONDS",
    "INSTALL",
    "KUEUE_GATES_WANTED",
    "KUEUE_GATE_DEFAULTS",
    "OK",
    "PROBE_NAME",
    "RETRY_MINUTES",
    "WARN",
    "DeploymentRecord",
    "EndpointProbe",
    "Finding",
    "KueueConfigError",
    "KueueSettings",
    "LeaseRecord",
    "LiveReview",
    "ReviewProbe",
    "Rule",
    "Transformation",
    "WebhookEntry",
    "admission_check",
    "ca_bundle_fix",
    "compact_json",
    "drain_stopped",
    "duration_text",
    "endpoints",
    "entry_fix",
    "feature_gate_flag",
    "field_map",
    "histogram_quantile",
    "inactive_pools",
    "kueue_configuration",
    "kueue_topologies",
    "live_reviews",
    "operator_fix",
    "operator_health",
    "orphaned_devices",
    "parse_deployment",
    "parse_kueue_settings",
    "parse_lease",
    "parse_rule",
    "parse_transformations",
    "parse_webhook_configuration",
    "placement_loops",
    "pools",
    "queues",
    "review_probes",
    "shell_word",
    "show",
    "stuck",
    "unreadable_cards",
    "url_base",
    "versions",
    "webhooks",
]
