//! [`Layout`]: a layout read from the text form the CLI and config take
//! (`twitter`, `baidu,epoch=2024-01-01`, `time=39,unit=10ms,...`), with
//! decode, compose and the run-out instant, failing with this layer's
//! [`Error`].

use std::fmt;
use std::time::Duration;

pub use idmint_core::{Decoded, IdParts};
use jiff::Timestamp;

use crate::error::Error;

/// A validated layout: how an ID's 63 (or fewer) bits split into time, node
/// and sequence. Cheap to copy; every method is pure.
///
/// # Examples
///
/// ```
/// use idmint_embed::{IdParts, Layout};
///
/// let baidu = Layout::parse("baidu")?;
/// let id = baidu.compose(IdParts { tick: 100, worker: 7, sequence: 3, ..IdParts::default() })?;
/// let parts = baidu.decode(id)?;
/// assert_eq!((parts.worker, parts.sequence), (7, 3));
/// assert_eq!(parts.time.to_string(), "2016-05-19T16:01:40Z");
/// // uid-generator's default layout: 28 bits of seconds from 2016-05-20 (UTC+8).
/// assert_eq!(baidu.runs_out_at().unwrap().to_string(), "2024-11-20T13:24:16Z");
/// assert_eq!(Layout::parse("nope").unwrap_err().code(), "invalid_layout_text");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout(idmint_core::Layout);

impl Default for Layout {
    /// Twitter's layout (`twitter`), every binding's default.
    fn default() -> Layout {
        Layout(idmint_core::Layout::TWITTER)
    }
}

impl Layout {
    /// Reads a layout's text form: a preset name (`twitter`, `leaf`, `baidu`,
    /// `sonyflake`, `discord`, `instagram`, `js53`, `tso`), a preset with
    /// fields changed (`twitter,epoch=2024-01-01`), or every field
    /// (`time=41,unit=1ms,epoch=...,worker=10,sequence=12`).
    ///
    /// # Errors
    /// `invalid_layout_text` or `invalid_layout`, naming the part at fault.
    pub fn parse(text: &str) -> Result<Layout, Error> {
        Ok(Layout(text.parse::<idmint_core::Layout>()?))
    }

    /// The core's layout.
    pub fn core(&self) -> &idmint_core::Layout {
        &self.0
    }

    /// Takes `id` apart: the start of its tick, datacenter, worker, rollback
    /// counter and sequence.
    ///
    /// # Errors
    /// `invalid_id` when `id` has bits set above the layout's fields.
    pub fn decode(&self, id: u64) -> Result<Decoded, Error> {
        Ok(self.0.decode(id)?)
    }

    /// Puts an ID together from its parts.
    ///
    /// # Errors
    /// `node_out_of_range` when a part does not fit its field,
    /// `layout_exhausted` when the tick is past the time field.
    pub fn compose(&self, parts: IdParts) -> Result<u64, Error> {
        Ok(self.0.compose(parts)?.get())
    }

    /// The tick `time` falls in, for [`Layout::compose`].
    ///
    /// # Errors
    /// `clock_before_epoch` before the epoch, `layout_exhausted` at or after
    /// [`Layout::runs_out_at`].
    pub fn tick_at(&self, time: Timestamp) -> Result<u64, Error> {
        Ok(self.0.tick_at(time)?)
    }

    /// The first instant the layout can't hold (no ID can be made from
    /// then on), or `None` when that is past the year 9999.
    pub fn runs_out_at(&self) -> Option<Timestamp> {
        self.0.runs_out_at()
    }

    /// The preset this layout is, if it is one.
    pub fn preset_name(&self) -> Option<&'static str> {
        self.0.preset_name()
    }

    /// The time unit: how long a tick lasts (1 ms for `twitter`, 1 s for
    /// `baidu`).
    pub fn unit(&self) -> Duration {
        self.0.unit()
    }

    /// IDs one worker can make per second (the layout's cap).
    pub fn ids_per_second_per_worker(&self) -> f64 {
        self.0.ids_per_second_per_worker()
    }

    /// How many worker IDs (the whole node field) the layout has.
    pub fn workers(&self) -> u64 {
        self.0.workers()
    }
}

impl fmt::Display for Layout {
    /// The full text form, which [`Layout::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<idmint_core::Layout> for Layout {
    fn from(layout: idmint_core::Layout) -> Layout {
        Layout(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_twitter() {
        assert_eq!(Layout::default(), Layout::parse("twitter").unwrap());
    }
}
