set terminal pngcairo noenhanced size 1000,560
set output 'docs/attention/attention-smollm2-135m-instruct.png'
set title 'smollm2-135m-instruct: 30 prompts of 2000 tokens'
set xlabel 'layer'
set xtics 1
set yrange [0:1]
set key outside right
set grid
plot 'docs/attention/attention-smollm2-135m-instruct.dat' u 1:2 w lp t 'top-10% mass', '' u 1:3 w lp t 'heads J@10%', '' u 1:4 w lp t 'heads J@40%', '' u 1:5 w lp t 'next layer J@25%', '' u 1:6 w lp t 'probe vs all J@25%', '' u 1:7 w lp t 'probe vs heads J@25%', 0.0526 dt 2 lc 'gray' t 'random J@10%', 0.25 dt 3 lc 'gray' t 'random J@40%', 0.1429 dt 4 lc 'gray' t 'random J@25%'
