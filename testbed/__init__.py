"""What the tests, the benchmarks and ``hack/`` share: a real control plane started from the cached binaries
(``controlplane``, its PKI in ``pki``), the operator as a process (``operator_process``), a GPU pool built on a live
API server as the operator derives one (``gpucluster``), a TCP proxy that can stall (``proxy``), the objects tests
are made of (``factories``, ``request_examples``), synthetic clusters for the benchmarks (``synthetic``), the bundled
example snapshot (``example_snapshot``) and the Pythons a plugin test runs on (``pythons``).

It is never installed with gpuctl: it is imported from a checkout, as ``tests`` and ``bench`` are.
"""
