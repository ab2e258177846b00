//! What every picture shares: the error type, the panel sizes, the colours and the font.

use plotters::prelude::*;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{path}: {message}")]
    Draw { path: String, message: String },
    #[error("{path}: nothing to plot: {reason}")]
    Empty { path: String, reason: String },
}

pub type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

pub fn draw_err(path: &Path, e: Box<dyn std::error::Error>) -> PlotError {
    PlotError::Draw {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

pub const PANEL_H: u32 = 190;
pub const COL_W: u32 = 720;
pub const DECISION: RGBColor = RGBColor(120, 40, 160);
pub const PROBE: RGBColor = RGBColor(230, 120, 0);
pub const READ: RGBColor = RGBColor(31, 119, 180);
pub const WRITE: RGBColor = RGBColor(214, 39, 40);
pub const SHADE: RGBColor = RGBColor(235, 235, 235);

pub fn font(size: u32) -> TextStyle<'static> {
    ("sans-serif", size).into_font().into()
}
