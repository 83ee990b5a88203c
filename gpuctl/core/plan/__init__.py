"""Maintenance plans, each step proven by simulation on the working copy (:mod:`gpuctl.core.simulate`).

- **Partitions** (:func:`plan_partitions`): which cards of a pool to switch mode so its pending demand is admitted —
  the fewest switches that admit the most of it. Cards switch by their vendor's rule (:mod:`gpuctl.core.modes`);
  idle cards first, then cards whose holders would have to finish (named, from the Pods' allocation records). The
  number of cards is estimated from the held demand (partition instances packed by the model's geometry), the layout
  simulated with the demand placed in order, grown while it admits more, then shrunk to the fewest switches that
  still admit as much. Every step is then simulated cumulatively: the demand it claims admitted is admitted. A
  layout that admitted nothing more is reported apart, never as a step.
- **Drain** (:func:`plan_drain`): ``kubectl drain`` in the working copy — the nodes cordoned, then node by node the
  Workloads (and the Pods outside Kueue, and the Instances) there evicted, and each evicted Workload queued again and
  simulated through the five gates on the nodes left, in Kueue's order.

Views before and after each step are the pools' views as the operator's status writer computes them, kept per node
(:class:`PoolTally`) so a step recomputes only the nodes it touches.


The package keeps one concern a module: ``steps`` (a step and what it waits on or evicts), ``tally`` (a pool's views
per node, and a plan's cost), ``demand`` (what a plan places and what it asks of the cards), ``partitions`` and
``drain`` (the two plans). Everything here is pure: it reads and changes only the working copy it is given.
"""

from gpuctl.core.plan.demand import (
    FOR_FAMILIES,
    ForSpec,
    demand_of,
    for_demand,
    parse_for,
    partition_cards,
    queue_demand,
)
from gpuctl.core.plan.drain import DrainPlan, Evicted, plan_drain
from gpuctl.core.plan.partitions import (
    MAX_ROUNDS,
    MAX_UNITS,
    PartitionPlan,
    Unit,
    partition_hint,
    plan_partitions,
    units,
)
from gpuctl.core.plan.steps import Holder, PlanError, Step
from gpuctl.core.plan.tally import PoolTally, cost

__all__ = [
    "FOR_FAMILIES",
    "MAX_ROUNDS",
    "MAX_UNITS",
    "DrainPlan",
    "Evicted",
    "ForSpec",
    "Holder",
    "PartitionPlan",
    "PlanError",
    "PoolTally",
    "Step",
    "Unit",
    "cost",
    "demand_of",
    "for_demand",
    "parse_for",
    "partition_cards",
    "partition_hint",
    "plan_drain",
    "plan_partitions",
    "queue_demand",
    "units",
]
