//! Scheduled housekeeping of the pipeline: steps a scheduler runs (the dispatcher Lambda's
//! housekeeping modes, `clinic dev`'s loop), each bounded in time and safe to run concurrently with
//! itself and with dispatchers.

pub mod reconcile;
