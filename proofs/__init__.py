"""The Z3 side: inductive proofs and Spacer (CHC) over a symbolic model, bounded search,
certificates, finite-state queries; generic over
:class:`chunkproof.spec.interface.SymbolicModel`."""
