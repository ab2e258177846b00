//! Pricing: what not merging saves on a device, in one place.
//!
//! - [`price`]: the merge path's price from samples, ns of CPU per bio with its 95%
//!   interval, keyed by scheduler class and workload [`price::Shape`], and a device's live
//!   table from it;
//! - [`floor`]: the saving floor ([`floor::SavingFloor`]), one value with its three units;
//! - [`live`]: live pricing as a pure state machine, fed the sampler's drained samples and
//!   the time by the daemon's driver (`daemon::pricing`);
//! - [`profile`]: cost profiles, their checks, and which cell prices which device (the one
//!   matching rule of the daemon and the simulator), keyed by `mergetune_kernel::scheduler::Scheduler`;
//! - [`worth`]: the table the policy reads ([`worth::Worth`]), from either;
//! - [`source`]: which of the two the config asks for; [`config`]: `[pricing]`.
//!
//! The policy uses pricing (a device's `Worth` rides in its caps); nothing here uses the
//! policy.

pub mod config;
#[cfg(test)]
mod fixtures;
pub mod floor;
pub mod live;
pub mod price;
pub mod profile;
pub mod source;
pub mod worth;
