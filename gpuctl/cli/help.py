"""Help as kubectl lays it out: a one-sentence summary in the command list (never cut mid-sentence), the
description, then Examples; and the sections every man page ends with (EXIT STATUS, ENVIRONMENT)."""

from __future__ import annotations

from typing import Final

SUMMARIES: Final[dict[str, str]] = {
    "views": "Show what each pool can still give (EX/SH/SL/PT).",
    "partitions": "Show offered, carved and free partitions per profile.",
    "workloads": "List Workloads with the gate that holds each.",
    "explain": "Explain which admission gate holds a workload.",
    "explain workload": "Explain the five gates for a Workload.",
    "explain pod": "Explain the gates for a Pod's Workload.",
    "explain instance": "Explain the gates for an Instance's Workload.",
    "simulate": "Show whether workloads would be admitted now, and where.",
    "fragmentation": "Show free capacity each request shape can use, and what is stranded.",
    "queue": "List pending Workloads in Kueue's order, with what each asks and waits on.",
    "diff": "Show what changed between two snapshots, or a snapshot and the cluster.",
    "top": "Watch pools, queues and held Workloads live.",
    "doctor": "Audit the admission chain and say how to fix each finding.",
    "dump": "Write a snapshot of the objects gpuctl reads.",
    "webhook": "Run the admission webhooks without storing anything.",
    "webhook dry-run": "Show what the webhooks do to a manifest.",
    "instancetype": "Create, freeze, rename and delete InstanceTypes.",
    "instancetype create": "Create an InstanceType, validated first.",
    "instancetype apply": "Create an InstanceType or change its mutable fields.",
    "instancetype rename": "Change an InstanceType's display name.",
    "instancetype describe": "Show an InstanceType with its views and queue.",
    "instancetype list": "List InstanceTypes.",
    "instancetype deactivate": "Take an InstanceType out of service.",
    "instancetype activate": "Put an InstanceType back in service.",
    "instancetype delete": "Delete an InstanceType (its queue drains first).",
    "instance": "List, stop and start Instances.",
    "instance list": "List Instances with their type, phase and node.",
    "instance stop": "Stop Instances.",
    "instance start": "Start stopped Instances.",
    "hold": "Block admission to a pool; running work keeps running.",
    "drain": "Drain a pool: evict its workloads, stop its instances.",
    "resume": "Return a pool to service.",
    "rbac": "Generate least-privilege roles for gpuctl's users.",
    "rbac admin": "Print the view, admin and dry-run roles for the pools.",
    "completion": "Print a shell completion script.",
    "version": "Print the version.",
}

EXAMPLES: Final[dict[str, str]] = {
    "views": """
  # What every pool can still give, live or from a snapshot
  gpuctl views
  gpuctl views --snapshot ./dump -o wide

  # One pool, per node with its fit labels, or per card
  gpuctl views gpustack--nvidia-a10g-linux-amd64 --by-node -o wide
  gpuctl views --by-card -o json

  # Compare with what the InstanceTypes publish; follow the ledger
  gpuctl views --published
  gpuctl views -w

  # Names and free whole cards, sorted
  gpuctl views --sort-by .accelerator.remaining -o custom-columns=NAME:.name,FREE:.accelerator.remaining""",
    "partitions": """
  # Per profile: offered, allocated, remaining
  gpuctl partitions
  # Per card, with each carved instance's placement
  gpuctl partitions gpustack--nvidia-h100-80gb-hbm3-linux-amd64 --by-card""",
    "workloads": """
  # The Workloads of the context's namespace, and those some gate holds everywhere
  gpuctl workloads
  gpuctl workloads -A --held

  # One pool's Workloads in one namespace, with the hints
  gpuctl workloads -t gpustack--nvidia-a10g-linux-amd64 -n team-a -o wide

  # Just the names of held Workloads
  gpuctl workloads -A --held -o jsonpath='{range .items[*]}{.namespace}/{.name}{"\\n"}{end}'""",
    "simulate": """
  # Would this Pod be admitted now, on which node and cards?
  gpuctl simulate -f examples/pod.yaml

  # Three manifests in sequence, each seeing the ones before it placed; exit 3 if any is held
  gpuctl simulate -f a.yaml -f b.yaml -f c.yaml --exit-code

  # What would make room for a held one (each change proven by simulation)
  gpuctl simulate -f train.yaml --suggest -o wide

  # What-if: a Workload finished, a pool drained, another queue at its quota
  gpuctl simulate -f train.yaml --without team-a/batch --drain gpustack--nvidia-a10g-linux-amd64 --at-quota team-b-cq

  # Capacity planning: how many more nodes like a10g-1 until the queue's head fits
  gpuctl simulate --workload team-a/train --add-nodes auto --like a10g-1""",
    "doctor": """
  # Every check on the live cluster; exit 3 when one fails
  gpuctl doctor

  # On a dump attached to a ticket, as JSON
  gpuctl doctor --snapshot ./ticket-4711 -o json

  # The resources block Kueue's Configuration needs (the credits transformations and exclusions)
  gpuctl doctor --kueue-resources""",
    "top": """
  # Live, redrawn as the watches see changes (s sorts, j/k select, e explains, q quits)
  gpuctl top

  # One frame, e.g. for a ticket
  gpuctl top --once --snapshot ./dump""",
    "diff": """
  # What happened between 02:00 and 02:30
  gpuctl dump ./at-0200 && sleep 1800 && gpuctl dump ./at-0230
  gpuctl diff ./at-0200 ./at-0230

  # A ticket's snapshot against the cluster now, as JSON
  gpuctl diff ./ticket-4711 live -o json""",
    "queue": """
  # Every queue's pending Workloads in Kueue's order
  gpuctl queue

  # One pool's queue; runtimes bounded by a label where Workloads set no maximumExecutionTimeSeconds
  gpuctl queue gpustack--nvidia-a10g-linux-amd64 --runtime-label example.com/max-runtime-seconds -o wide""",
    "fragmentation": """
  # Every pool against its pending Workloads' shapes, with hints to free whole cards
  gpuctl fragmentation -o wide

  # One pool against shapes of your choosing, per node
  gpuctl fragmentation gpustack--nvidia-a10g-linux-amd64 --shape ex=2 --shape sl=60 --by-node""",
    "explain": """
  gpuctl explain workload team-a/train
  gpuctl explain pod train-0 -n team-a
  gpuctl explain instance notebook -n team-a --exit-code""",
    "explain workload": """
  # Which gate holds it, with evidence and a hint
  gpuctl explain workload team-a/train
  # In a script: exit 3 while held
  gpuctl explain workload train -n team-a --exit-code -o json""",
    "explain pod": """
  gpuctl explain pod train-0 -n team-a""",
    "explain instance": """
  gpuctl explain instance notebook -n team-a""",
    "dump": """
  # A snapshot to attach to a ticket (credentials redacted), then read offline
  gpuctl dump ./dump
  gpuctl views --snapshot ./dump

  # Replace an older dump of one namespace
  gpuctl dump ./dump -n team-a --overwrite""",
    "webhook": """
  gpuctl webhook dry-run pod -f pod.yaml""",
    "webhook dry-run": """
  # What the Pod webhook does to a manifest (exit 3 when denied)
  gpuctl webhook dry-run pod -f pod.yaml

  # Ask the deployed webhooks too, and whether they agree with this version
  gpuctl webhook dry-run pod -f pod.yaml --server-side --compare

  # Replay an update of an Instance
  gpuctl webhook dry-run instance -f new.yaml --old stored.yaml --operation UPDATE""",
    "instancetype": """
  gpuctl instancetype list
  gpuctl instancetype create a10g-12c128g --accelerator-group nvidia-a10g --unit-cpu 12 --unit-ram 128Gi""",
    "instancetype create": """
  gpuctl instancetype create a10g-12c128g --accelerator-group nvidia-a10g --unit-cpu 12 --unit-ram 128Gi
  gpuctl instancetype create -f type.yaml --dry-run=server""",
    "instancetype apply": """
  gpuctl instancetype apply -f type.yaml""",
    "instancetype rename": """
  gpuctl instancetype rename a10g-12c128g "A10G, 12 cores" """,
    "instancetype describe": """
  gpuctl instancetype describe gpustack--nvidia-a10g-linux-amd64""",
    "instancetype list": """
  gpuctl instancetype list -o wide
  gpuctl instancetype list -l feature.gpustack.ai/acceleratable=true -o name""",
    "instancetype deactivate": """
  gpuctl instancetype deactivate a10g-12c128g""",
    "instancetype activate": """
  gpuctl instancetype activate a10g-12c128g""",
    "instancetype delete": """
  gpuctl instancetype delete a10g-12c128g --wait""",
    "instance": """
  gpuctl instance list -A
  gpuctl instance stop notebook -n team-a""",
    "instance list": """
  gpuctl instance list -A
  gpuctl instance list -t gpustack--nvidia-a10g-linux-amd64 -n team-a --show-labels""",
    "instance stop": """
  gpuctl instance stop notebook -n team-a
  gpuctl instance stop --instancetype gpustack--nvidia-a10g-linux-amd64 -n team-a --yes --dry-run=client""",
    "instance start": """
  gpuctl instance start notebook -n team-a""",
    "hold": """
  gpuctl hold gpustack--nvidia-a10g-linux-amd64
  gpuctl hold gpustack--nvidia-a10g-linux-amd64 --dry-run=server""",
    "drain": """
  # Evict and stop, and follow it until nothing is left
  gpuctl drain gpustack--nvidia-a10g-linux-amd64 --wait""",
    "resume": """
  gpuctl resume gpustack--nvidia-a10g-linux-amd64""",
    "rbac": """
  gpuctl rbac admin --bind-group gpu-admins --dry-run-namespace team-a | kubectl apply -f -""",
    "rbac admin": """
  gpuctl rbac admin --bind-group gpu-admins --dry-run-namespace team-a | kubectl apply -f -""",
    "completion": """
  source <(gpuctl completion bash)
  gpuctl completion zsh > "${fpath[1]}/_gpuctl"
  gpuctl completion fish > ~/.config/fish/completions/gpuctl.fish""",
    "version": """
  gpuctl version
  gpuctl version --show-cluster""",
}

EXIT_STATUS: Final = """0   success.
1   the command could not do its work: the API server unreachable, a file unreadable, a conflict not resolved.
2   usage: flags or arguments that do not fit together.
3   the answer is no where a script needs it: a denied dry-run, a held workload with --exit-code."""

ENVIRONMENT: Final = """GPUCTL_CACHE_DIR
    Where shell completion keeps the names it read between TABs (default $XDG_CACHE_HOME/gpuctl/names, else
    ~/.cache/gpuctl/names).
GPUCTL_SNAPSHOT
    Read objects from this snapshot (a file or a directory) instead of a cluster, as --snapshot does.
GPUCTL_SNAPSHOT_MAX_BYTES
    The largest snapshot file read (default 512 MiB).
KUBECONFIG
    The kubeconfig file(s), colon-separated, when --kubeconfig is not given (default ~/.kube/config).
NO_COLOR
    Print tables without bold headers or colour."""


def epilog(path: str) -> str | None:
    """The ``Examples:`` block shown after a command's help (click keeps the ``\\b`` block as written)."""
    examples = EXAMPLES.get(path)
    if not examples:
        return None
    # click rewraps every paragraph but one marked with \b: mark each.
    return "\b\nExamples:" + examples.replace("\n\n", "\n\n\b\n")
