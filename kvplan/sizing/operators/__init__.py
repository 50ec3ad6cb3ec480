"""What one forward pass runs on one GPU, as operators with shapes: the GEMMs, the routed
experts, attention by kind, the all-reduces and the elementwise traffic of a model at a
tensor-parallel degree. The step model (kvplan.sim.ops) times them; `kvplan profile`
(kvplan.real.op_profile) measures them at these shapes."""
