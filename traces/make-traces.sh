#!/usr/bin/env bash
# Makes the layered per-frame size traces in traces/ from real encodes (needs ffmpeg:
# apt-get install ffmpeg). Each source is encoded with x264 at four qualities (CRF 38, 32,
# 26, 20; 640x360, 30 fps, GOP 30, no B-frames, 20 s); layer 0 is the lowest quality's frame
# size and layer k the extra bytes quality k needs over quality k-1. This approximates a
# layered (SPEG-like) encoding with a real encoder's frame-to-frame variation.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ffmpeg >/dev/null || { echo "needs ffmpeg: apt-get install ffmpeg" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
crfs=(38 32 26 20)
for src in testsrc2 mandelbrot; do
  for crf in "${crfs[@]}"; do
    ffmpeg -loglevel error -y -f lavfi -i "$src=size=640x360:rate=30" -t 20 \
      -c:v libx264 -preset veryfast -crf "$crf" -g 30 -bf 0 -pix_fmt yuv420p "$tmp/$src-$crf.mp4"
    ffprobe -loglevel error -select_streams v:0 -show_entries packet=size -of csv=p=0 \
      "$tmp/$src-$crf.mp4" > "$tmp/$src-$crf.sizes"
  done
  out="traces/$src-4layer.csv"
  {
    echo "# made by traces/make-traces.sh: x264 CRF ${crfs[*]}, 640x360, 30 fps, GOP 30, 20 s"
    echo "frame,layer0,layer1,layer2,layer3"
    paste -d, "$tmp/$src-38.sizes" "$tmp/$src-32.sizes" "$tmp/$src-26.sizes" "$tmp/$src-20.sizes" |
      awk -F, '{ d1=$2-$1; d2=$3-$2; d3=$4-$3; if (d1<0) d1=0; if (d2<0) d2=0; if (d3<0) d3=0;
                 printf "%d,%d,%d,%d,%d\n", NR-1, $1, d1, d2, d3 }'
  } > "$out"
  echo "wrote $out ($(($(wc -l < "$out") - 2)) frames)"
done
