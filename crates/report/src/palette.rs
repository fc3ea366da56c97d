//! Colours and marker shapes for series. Twelve colours chosen to stay apart from each other
//! and from the grey of reference curves (Tableau 10's hues with the two look-alikes darkened,
//! plus navy and olive); with more than twelve series the colours repeat but the marker shapes
//! (cycling with a different period) keep neighbours distinguishable.

pub use plotters::style::RGBColor;

pub const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),  // blue
    RGBColor(255, 127, 14),  // orange
    RGBColor(44, 160, 44),   // green
    RGBColor(214, 39, 40),   // red
    RGBColor(148, 103, 189), // purple
    RGBColor(140, 86, 75),   // brown
    RGBColor(227, 119, 194), // pink
    RGBColor(110, 110, 110), // dark grey
    RGBColor(160, 160, 20),  // olive
    RGBColor(23, 170, 190),  // teal
    RGBColor(20, 40, 120),   // navy
    RGBColor(120, 200, 80),  // light green
];

/// The colour of the `i`-th series.
pub fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Grey, for reference curves (the papers' numbers).
pub const REFERENCE: RGBColor = RGBColor(150, 150, 150);

/// Black, for the one line every other is measured against (an optimum, a bound).
pub const BLACK: RGBColor = RGBColor(0, 0, 0);
