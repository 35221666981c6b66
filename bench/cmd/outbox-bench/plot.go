package main

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

// drawPNG draws three panels: drain throughput (relay vs pg_recvlogical,
// with Kafka's producer ceiling), commit-to-receipt latency quantiles per
// offered rate, and the relay's peak RSS against its targets.
func drawPNG(r *results, path string) error {
	panels := []*plot.Plot{throughputPlot(r), latencyPlot(r), memoryPlot(r)}
	const w, h = 16 * vg.Inch, 5 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 8, PadTop: vg.Millimeter * 3,
		PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

func hline(p *plot.Plot, y float64, c color.Color, label string) {
	xmin, xmax := p.X.Min, p.X.Max
	l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: y}, {X: xmax, Y: y}})
	if err != nil {
		return
	}
	l.Color = c
	l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	l.Width = vg.Points(1.5)
	p.Add(l)
	if label != "" {
		p.Legend.Add(label, l)
	}
}

func throughputPlot(r *results) *plot.Plot {
	p := newPlot("Drain throughput (same WAL, same run)", "", "events/s")
	var names []string
	var ceil, relay plotter.Values
	for _, d := range r.Drains {
		if !d.complete() {
			continue
		}
		names = append(names, fmt.Sprintf("%d-event tx%s (%.2f×)", d.Mode, d.short(), d.Ratio()))
		ceil = append(ceil, d.CeilingRate())
		relay = append(relay, d.RelayRate())
	}
	if len(names) == 0 {
		p.Title.Text += ": not measured"
		return p
	}
	bw := vg.Points(40)
	for i, s := range []struct {
		label string
		v     plotter.Values
	}{{"pg_recvlogical (ceiling)", ceil}, {"outbox-relay", relay}} {
		b, err := plotter.NewBarChart(s.v, bw)
		if err != nil {
			continue
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(2*i-1) * bw / 2
		p.Add(b)
		p.Legend.Add(s.label, b)
	}
	p.NominalX(names...)
	p.Y.Min = 0
	top := 0.0
	for i := range ceil {
		top = math.Max(top, math.Max(ceil[i], relay[i]))
	}
	if r.Kafka != nil && r.Kafka.Max != nil {
		top = math.Max(top, r.Kafka.Max.RecPerSec)
		p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
		hline(p, r.Kafka.Max.RecPerSec, color.RGBA{R: 120, G: 120, B: 120, A: 255}, "Kafka ProducerPerformance (300 B)")
	}
	p.Y.Max = top * 1.25
	return p
}

// nines maps a quantile to -log10(1-q): p90 → 1, p99 → 2, p99.9 → 3.
func nines(q float64) float64 { return -math.Log10(1 - q) }

func latencyPlot(r *results) *plot.Plot {
	p := newPlot("Commit → consumer receipt", "quantile", "latency (ms)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{
		{Value: nines(0.5), Label: "p50"}, {Value: nines(0.9), Label: "p90"},
		{Value: nines(0.99), Label: "p99"}, {Value: nines(0.999), Label: "p99.9"},
	})
	drawn := 0
	ymin, ymax := math.Inf(1), 0.0
	for i, l := range r.Latency {
		if len(l.CDF) == 0 {
			continue
		}
		var xys plotter.XYs
		for k, v := range l.CDF[:len(l.CDF)-1] { // the last point is the maximum (q = 1)
			q := float64(k+1) / float64(len(l.CDF))
			if q < 0.1 {
				continue
			}
			v = math.Max(v, 0.1)
			xys = append(xys, plotter.XY{X: nines(q), Y: v})
			ymin, ymax = math.Min(ymin, v), math.Max(ymax, v)
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			continue
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(2)
		p.Add(line)
		label := fmt.Sprintf("%s/s ×%d%s", benchkit.Num(float64(l.Target)), max(l.TxSize, 1), l.short())
		if !l.Held {
			label += fmt.Sprintf(" (got %s)", benchkit.Num(l.Achieved))
		}
		p.Legend.Add(label, line)
		if l.HistCount > 0 && l.HistP99 > 0 {
			s, err := plotter.NewScatter(plotter.XYs{{X: nines(0.99), Y: l.HistP99}})
			if err == nil {
				s.GlyphStyle.Color = plotutil.Color(i)
				s.GlyphStyle.Shape = draw.CrossGlyph{}
				s.GlyphStyle.Radius = vg.Points(5)
				p.Add(s)
			}
		}
		drawn++
	}
	if drawn == 0 {
		p.Title.Text += ": not measured"
		p.Y.Scale = plot.LinearScale{}
		p.Y.Tick.Marker = plot.DefaultTicks{}
		return p
	}
	p.Title.Text += " (× = ack p99 from the relay's histogram, interpolated)"
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Min, p.X.Max = nines(0.1), nines(0.999)+0.05
	p.Y.Min, p.Y.Max = math.Max(0.1, ymin/1.5), math.Max(ymax, 25)*1.5
	hline(p, ms(targetP99), color.RGBA{R: 200, A: 255}, "25 ms target (p99 at 5,000/s)")
	return p
}

func memoryPlot(r *results) *plot.Plot {
	p := newPlot("Relay peak RSS (VmHWM)", "", "MiB")
	var names []string
	var v plotter.Values
	for _, d := range r.Drains {
		if d.PeakRSS > 0 {
			names = append(names, fmt.Sprintf("drain %d-event tx%s", d.Mode, d.short()))
			v = append(v, benchkit.MiB(d.PeakRSS))
		}
	}
	if bt := r.BigTx; bt != nil && bt.PeakRSS > 0 {
		names = append(names, fmt.Sprintf("%s-row tx", benchkit.Num(float64(bt.Rows))))
		v = append(v, benchkit.MiB(bt.PeakRSS))
	}
	if len(v) == 0 {
		p.Title.Text += ": not measured"
		return p
	}
	b, err := plotter.NewBarChart(v, vg.Points(40))
	if err == nil {
		b.Color = plotutil.Color(2)
		b.LineStyle.Width = 0
		p.Add(b)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min, p.Y.Max = 0, 140
	hline(p, float64(targetDrainRSS>>20), color.RGBA{R: 200, G: 120, A: 255}, "64 MiB (drain target)")
	hline(p, float64(targetBigTxRSS>>20), color.RGBA{R: 200, A: 255}, "128 MiB (large transaction target)")
	return p
}
