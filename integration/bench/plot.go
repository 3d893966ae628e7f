package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlot draws the median throughput (MB/s of record values) of every
// contender, one group of bars per row (produce rows, consume rows, copy
// rows; one bar per record size), into a PNG.
func writePlot(path string, groups ...[]*cell) error {
	type bar struct {
		label string
		vals  map[int]float64
	}
	var bars []bar
	sizes := map[int]bool{}
	var sizeList []int
	for _, cells := range groups {
		seen := map[string]int{}
		for _, c := range cells {
			if !sizes[c.size] {
				sizes[c.size] = true
				sizeList = append(sizeList, c.size)
			}
			for _, name := range orderedNames(c) {
				v, n := c.med(name, func(r result) float64 { return r.MBPerSec(c.size) })
				if n == 0 {
					continue
				}
				label := name
				if c.kind == "produce" {
					label = fmt.Sprintf("%s (%s)", name, c.interval)
				}
				i, ok := seen[label]
				if !ok {
					i = len(bars)
					seen[label] = i
					bars = append(bars, bar{label: label, vals: map[int]float64{}})
				}
				bars[i].vals[c.size] = v
			}
		}
	}
	if len(bars) == 0 {
		return fmt.Errorf("nothing measured")
	}
	p := plot.New()
	p.Title.Text = "Median throughput per contender (MB/s of record values)"
	p.X.Label.Text = "MB/s"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	names := make([]string, len(bars))
	for i, b := range bars {
		names[i] = b.label
	}
	w := vg.Points(9)
	for si, size := range sizeList {
		vals := make(plotter.Values, len(bars))
		for i, b := range bars {
			vals[i] = b.vals[size]
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bc.Color = plotutil.Color(si)
		bc.LineStyle.Width = 0
		bc.Offset = w * vg.Length(si-len(sizeList)/2)
		bc.Horizontal = true
		p.Add(bc)
		p.Legend.Add(sizeLabel(size), bc)
	}
	p.NominalY(names...)
	p.BackgroundColor = color.White
	return p.Save(10*vg.Inch, vg.Length(len(bars))*vg.Points(26)+vg.Inch, path)
}

// orderedNames are the contenders of a cell in the tables' order.
func orderedNames(c *cell) []string {
	var all []string
	switch c.kind {
	case "produce":
		all = append([]string{cEOS, cCadence}, produceContenders[1:]...)
	case "consume":
		all = []string{cNative, cNativeArrow, cCP, cRawC}
	default:
		all = []string{cCopyMsg, cCopyArrow, cCopyRaw}
	}
	var out []string
	for _, n := range all {
		if c.rounds[n] != nil {
			out = append(out, n)
		}
	}
	return out
}
