//! Line and CDF charts as SVG strings. Every series is named *at the end of its line* (a column
//! of direct labels right of the plot, pushed apart so they never overlap, with a thin leader to
//! the line's end when a label had to move), so 7–12 series stay readable without a legend box.
//! Points may carry a 95 % CI half-width, drawn as an error bar with caps.

use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::palette;

/// How a series' line is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stroke {
    /// 2 px, the default.
    Solid,
    /// 2 px dashed: a second world (the simulator) or a paper's curve.
    Dashed,
    /// 1 px, lighter: a secondary line of the same colour (least loaded node).
    Thin,
    /// No line, only the markers: separate measurements (a paper's points).
    None,
}

/// A mark at each point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Marker {
    None,
    Circle,
    Cross,
    Triangle,
}

/// One named line.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// 95 % CI half-width per point (empty: no error bars).
    pub ci95: Vec<f64>,
    /// `None`: the palette's next colour.
    pub colour: Option<RGBColor>,
    pub stroke: Stroke,
    pub marker: Marker,
    /// Named at its end (off for a line that shares its partner's label).
    pub label: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            ci95: Vec::new(),
            colour: None,
            stroke: Stroke::Solid,
            marker: Marker::Circle,
            label: true,
        }
    }

    /// Error bars: one 95 % CI half-width per point, in the points' order.
    pub fn with_ci(mut self, ci95: Vec<f64>) -> Series {
        self.ci95 = ci95;
        self
    }

    pub fn colour(mut self, c: RGBColor) -> Series {
        self.colour = Some(c);
        self
    }

    pub fn stroke(mut self, s: Stroke) -> Series {
        self.stroke = s;
        self
    }

    pub fn marker(mut self, m: Marker) -> Series {
        self.marker = m;
        self
    }

    /// Not named at its end.
    pub fn unlabelled(mut self) -> Series {
        self.label = false;
        self
    }
}

/// A chart: axes, series, optional dashed reference lines.
pub struct Chart {
    title: String,
    x_desc: String,
    y_desc: String,
    size: (u32, u32),
    log_x: bool,
    x_range: Option<(f64, f64)>,
    y_range: Option<(f64, f64)>,
    x_format: Option<Box<dyn Fn(f64) -> String>>,
    x_ticks: Option<usize>,
    hlines: Vec<f64>,
    series: Vec<Series>,
}

impl Chart {
    pub fn new(
        title: impl Into<String>,
        x_desc: impl Into<String>,
        y_desc: impl Into<String>,
    ) -> Chart {
        Chart {
            title: title.into(),
            x_desc: x_desc.into(),
            y_desc: y_desc.into(),
            size: (760, 400),
            log_x: false,
            x_range: None,
            y_range: None,
            x_format: None,
            x_ticks: None,
            hlines: Vec::new(),
            series: Vec::new(),
        }
    }

    /// A cumulative distribution: log x, y the fraction 0–1, lines without markers.
    pub fn cdf(
        title: impl Into<String>,
        x_desc: impl Into<String>,
        y_desc: impl Into<String>,
    ) -> Chart {
        Chart::new(title, x_desc, y_desc).log_x().y_range(0.0, 1.0)
    }

    pub fn size(mut self, width: u32, height: u32) -> Chart {
        self.size = (width, height);
        self
    }

    pub fn log_x(mut self) -> Chart {
        self.log_x = true;
        self
    }

    pub fn x_range(mut self, lo: f64, hi: f64) -> Chart {
        self.x_range = Some((lo, hi));
        self
    }

    pub fn y_range(mut self, lo: f64, hi: f64) -> Chart {
        self.y_range = Some((lo, hi));
        self
    }

    /// How x tick values are written.
    pub fn x_format(mut self, f: impl Fn(f64) -> String + 'static) -> Chart {
        self.x_format = Some(Box::new(f));
        self
    }

    /// Categories on x: point `i` sits at x = i and its tick reads `names[i]`.
    pub fn x_categories(mut self, names: Vec<String>) -> Chart {
        let n = names.len().max(2);
        self.x_range = Some((-0.2, n as f64 - 0.8));
        self.x_ticks = Some(n);
        self.x_format(move |x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
    }

    /// A dashed horizontal reference line.
    pub fn hline(mut self, y: f64) -> Chart {
        self.hlines.push(y);
        self
    }

    /// Adds a series; without a colour of its own it takes the palette's next.
    pub fn add(&mut self, mut s: Series) {
        if s.colour.is_none() {
            let used = self.series.iter().filter(|s| s.label).count();
            s.colour = Some(palette::colour(used));
        }
        self.series.push(s);
    }

    pub fn with(mut self, s: Series) -> Chart {
        self.add(s);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.series.iter().all(|s| s.points.is_empty())
    }

    fn visible(&self, x: f64) -> bool {
        x.is_finite() && (!self.log_x || x > 0.0)
    }

    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let pts = || {
            self.series.iter().flat_map(|s| {
                s.points
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| self.visible(p.0) && p.1.is_finite())
                    .map(|(i, p)| (p.0, p.1, s.ci95.get(i).copied().unwrap_or(0.0)))
            })
        };
        let x = self.x_range.unwrap_or_else(|| {
            let (lo, hi) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
            if lo > hi {
                return if self.log_x { (1.0, 10.0) } else { (0.0, 1.0) };
            }
            if self.log_x {
                (lo / 1.15, (hi * 1.15).max(lo * 2.0))
            } else {
                let pad = ((hi - lo) * 0.03).max(if hi == lo { 0.5 } else { 0.0 });
                let lo2 = if lo >= 0.0 {
                    (lo - pad).max(0.0)
                } else {
                    lo - pad
                };
                (lo2, hi + pad)
            }
        });
        let y = self.y_range.unwrap_or_else(|| {
            let (lo, hi) = pts().fold((0.0f64, 0.0f64), |(a, b), p| {
                (a.min(p.1 - p.2), b.max(p.1 + p.2))
            });
            let hi = if hi > 0.0 { hi * 1.08 } else { 1.0 };
            (if lo < 0.0 { lo * 1.08 } else { 0.0 }, hi)
        });
        (x, y)
    }

    /// Room right of the plot for the longest direct label (about 7 px a character).
    fn label_room(&self) -> u32 {
        let longest = self
            .series
            .iter()
            .filter(|s| s.label)
            .map(|s| s.name.chars().count())
            .max()
            .unwrap_or(0);
        ((longest as u32) * 7 + 24).clamp(24, 260)
    }

    /// The chart as an SVG document.
    pub fn svg(&self) -> Result<String, String> {
        let ((x0, x1), (y0, y1)) = self.ranges();
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, self.size).into_drawing_area();
            root.fill(&WHITE).map_err(err)?;
            let mut b = ChartBuilder::on(&root);
            b.caption(&self.title, ("sans-serif", 17))
                .margin(12)
                .margin_right(self.label_room())
                .x_label_area_size(40)
                .y_label_area_size(60);
            if self.log_x {
                let mut chart = b
                    .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                    .map_err(err)?;
                self.draw(&root, &mut chart)?;
            } else {
                let mut chart = b.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?;
                self.draw(&root, &mut chart)?;
            }
            root.present().map_err(err)?;
        }
        Ok(svg)
    }

    fn draw<'a, X>(
        &self,
        root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
        chart: &mut ChartContext<
            'a,
            SVGBackend<'a>,
            Cartesian2d<X, plotters::coord::types::RangedCoordf64>,
        >,
    ) -> Result<(), String>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        {
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(self.x_desc.as_str())
                .y_desc(self.y_desc.as_str())
                .bold_line_style(BLACK.mix(0.12))
                .light_line_style(BLACK.mix(0.04));
            if let Some(n) = self.x_ticks {
                mesh.x_labels(n);
            }
            let format = |x: &f64| match &self.x_format {
                Some(f) => f(*x),
                None => default_format(*x),
            };
            mesh.x_label_formatter(&format);
            mesh.draw().map_err(err)?;
        }
        let (xr, _) = (chart.x_range(), chart.y_range());
        for &y in &self.hlines {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(xr.start, y), (xr.end, y)],
                    6,
                    4,
                    BLACK.mix(0.5).stroke_width(1),
                ))
                .map_err(err)?;
        }
        let mut ends = Vec::new();
        for s in &self.series {
            let c = s.colour.unwrap_or(palette::REFERENCE);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|p| self.visible(p.0) && p.1.is_finite())
                .collect();
            if pts.is_empty() {
                continue;
            }
            let line = match s.stroke {
                Stroke::Solid | Stroke::Dashed | Stroke::None => c.stroke_width(2),
                Stroke::Thin => c.mix(0.6).stroke_width(1),
            };
            match s.stroke {
                Stroke::None => {}
                Stroke::Dashed => {
                    chart
                        .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, line))
                        .map_err(err)?;
                }
                Stroke::Solid | Stroke::Thin => {
                    chart
                        .draw_series(LineSeries::new(pts.clone(), line))
                        .map_err(err)?;
                }
            }
            match s.marker {
                Marker::None => {}
                Marker::Circle => {
                    chart
                        .draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))
                        .map_err(err)?;
                }
                Marker::Cross => {
                    chart
                        .draw_series(pts.iter().map(|p| Cross::new(*p, 4, c.stroke_width(1))))
                        .map_err(err)?;
                }
                Marker::Triangle => {
                    chart
                        .draw_series(pts.iter().map(|p| TriangleMarker::new(*p, 3, c.filled())))
                        .map_err(err)?;
                }
            }
            self.error_bars(root, chart, s, c)?;
            if s.label {
                let end = *pts.last().expect("not empty");
                ends.push((s.name.as_str(), c, chart.backend_coord(&end)));
            }
        }
        let plot = chart.plotting_area().get_pixel_range();
        direct_labels(root, ends, plot.0.end, (plot.1.start, plot.1.end))
    }

    /// Vertical bars with caps, drawn in pixels so the caps keep their width on a log axis.
    fn error_bars<'a, X>(
        &self,
        root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
        chart: &ChartContext<
            'a,
            SVGBackend<'a>,
            Cartesian2d<X, plotters::coord::types::RangedCoordf64>,
        >,
        s: &Series,
        c: RGBColor,
    ) -> Result<(), String>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        // A bar longer than the plot stops at its edge, without the cap there: a few
        // repetitions give wide intervals (t = 12.7 with two), which must not cross the axes.
        let (_, (y_lo, y_hi)) = self.ranges();
        for (p, ci) in s.points.iter().zip(&s.ci95) {
            if *ci <= 0.0 || !ci.is_finite() || !self.visible(p.0) {
                continue;
            }
            let (hi, lo) = (p.1 + ci, p.1 - ci);
            let (x, top) = chart.backend_coord(&(p.0, hi.min(y_hi)));
            let (_, bottom) = chart.backend_coord(&(p.0, lo.max(y_lo)));
            let style = c.stroke_width(1);
            root.draw(&PathElement::new(vec![(x, top), (x, bottom)], style))
                .map_err(err)?;
            for (y, inside) in [(top, hi <= y_hi), (bottom, lo >= y_lo)] {
                if inside {
                    root.draw(&PathElement::new(vec![(x - 3, y), (x + 3, y)], style))
                        .map_err(err)?;
                }
            }
        }
        Ok(())
    }
}

/// Names right of the plot at the height of each line's end, moved apart (13 px at least) and
/// kept inside the plot's height; a thin leader joins a line's end to its name.
fn direct_labels(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    mut ends: Vec<(&str, RGBColor, (i32, i32))>,
    plot_right: i32,
    (top, bottom): (i32, i32),
) -> Result<(), String> {
    const GAP: i32 = 13;
    ends.sort_by_key(|e| e.2 .1);
    let mut ys: Vec<i32> = ends.iter().map(|e| e.2 .1.clamp(top, bottom)).collect();
    for i in 1..ys.len() {
        ys[i] = ys[i].max(ys[i - 1] + GAP);
    }
    // Pushed past the bottom: shift up from the last one.
    if let Some(&last) = ys.last() {
        if last > bottom {
            let n = ys.len();
            ys[n - 1] = bottom;
            for i in (0..n - 1).rev() {
                ys[i] = ys[i].min(ys[i + 1] - GAP);
            }
        }
    }
    let x = plot_right + 8;
    for ((name, c, (ex, ey)), y) in ends.iter().zip(ys) {
        if *ex < plot_right - 2 || (*ey - y).abs() > 2 {
            root.draw(&PathElement::new(
                vec![(*ex, *ey), (plot_right + 1, y), (x - 2, y)],
                c.mix(0.5).stroke_width(1),
            ))
            .map_err(err)?;
        }
        let style = TextStyle::from(("sans-serif", 14).into_font())
            .color(c)
            .pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(name.to_string(), (x, y), style))
            .map_err(err)?;
    }
    Ok(())
}

/// Tick values without float noise: integers plain, others to the digits they need.
fn default_format(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').to_string()
    }
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

#[cfg(test)]
mod tests;
