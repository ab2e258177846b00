//! The simulated block-device stack (see docs/simulator.md).
