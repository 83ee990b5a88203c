"""What-if: run Workloads through the five gates on an in-memory copy of the cluster, in sequence.

Each gate is the function the cluster's own gate runs, or Kueue's rule as its source states it:

1. the Pod webhook (:func:`gpuctl.core.webhooks.review`) on the Pod Kueue's integration creates, then the Workload
   fit-pin webhook on the Workload;
2. Kueue's ``credits`` quota (with cohort borrowing, :func:`gpuctl.core.credits.quota_room`) and its TAS placement
   (:mod:`gpuctl.core.tas`), flavor by flavor in the queue's order;
3. the ``gpustack-node-devices`` check (:func:`gpuctl.core.fit.judge_workload`) on the Workload as Kueue reserved it;
4. the capacity keys left on each assigned node;
5. the allocator's picks (:func:`gpuctl.core.allocator.allocate`), card by card.

An admitted Workload is then committed: its Pods are bound with the allocation records ``Allocate`` would write, the
ledgers of their nodes are rebuilt from them, and the quota and node room they take are charged, so the next
Workload sees it placed. Nothing is ever written to the cluster.

The package keeps one concern a module: ``state`` (the input and the scenarios that grow it), ``requests`` (a Pod
shape's requests, computed once), ``working_copy`` (the ledgers, the rooms and the quota used), ``reservation``
(gate 2: quota, TAS and preemption), ``placement`` (gates 4 and 5), ``simulator`` (gates 1 and 3, the order of the
gates, the commit) and ``outcome`` (the answer for one Workload). ``Simulator`` is the working copy with gate 2's
and gates 4 and 5's methods mixed in.
"""

from gpuctl.core.simulate.outcome import Outcome, PlacedNode
from gpuctl.core.simulate.reservation import NO_LONGER_FITS
from gpuctl.core.simulate.simulator import Simulator
from gpuctl.core.simulate.state import ClusterState, ScenarioError

__all__ = ["NO_LONGER_FITS", "ClusterState", "Outcome", "PlacedNode", "ScenarioError", "Simulator"]
