set terminal pngcairo noenhanced size 1000,520
set output 'docs/results/fig-disk.png'
set title 'disk: TTFT mean (ms)'
set ylabel 'TTFT mean (ms)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set key outside right
set grid ytics
set xtics rotate by -20
set yrange [0:*]
plot for [i=2:7] 'docs/results/fig-disk.dat' using i:xtic(1) title columnheader(i)
