#!/usr/bin/env bash
# Makes the image fixtures of ImageHeadersTests (and the seeds of Fuzz/ImageHeadersFuzz): one real file per
# format and variant, each with its own pixel size so a parser that reads the wrong field is caught.
# The files are committed; only whoever changes them needs the tools:
#   apt-get install -y imagemagick webp libimage-exiftool-perl   (and python3 for the APNG)
# Usage: Tests/ImageCacheTests/Fixtures/make-fixtures.sh   (writes next to itself)
set -euo pipefail
cd "$(dirname "$0")"
# /usr/bin/convert: ImageMagick 6 from Debian (a stand-in may shadow it in /usr/local/bin).
convert=/usr/bin/convert
for tool in "$convert" cwebp img2webp exiftool python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (see the header of this script)" >&2; exit 1; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# PNG, still: 37x23.
"$convert" -size 37x23 gradient:red-blue -strip still.png

# APNG, 3 frames of 19x11, written chunk by chunk (ImageMagick 6 has no APNG writer of its own).
python3 - <<'PY'
import struct, zlib
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff)
w, h = 19, 11
def pixels(shade):
    return zlib.compress(b"".join(b"\x00" + bytes([shade, 255 - shade, 64]) * w for _ in range(h)))
out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
out += chunk(b"acTL", struct.pack(">II", 3, 0))
seq = 0
for i, shade in enumerate((0, 120, 240)):
    out += chunk(b"fcTL", struct.pack(">IIIIIHHBB", seq, w, h, 0, 0, 1, 10, 0, 0)); seq += 1
    if i == 0:
        out += chunk(b"IDAT", pixels(shade))
    else:
        out += chunk(b"fdAT", struct.pack(">I", seq) + pixels(shade)); seq += 1
out += chunk(b"IEND", b"")
open("animated.png", "wb").write(out)
PY

# JPEG: baseline 41x29, progressive 43x31.
"$convert" -size 41x29 gradient:green-yellow -strip -quality 80 baseline.jpg
"$convert" -size 43x31 gradient:navy-orange -strip -quality 80 -interlace JPEG progressive.jpg

# JPEG 120x80 carrying a 16x12 EXIF thumbnail: the thumbnail's own SOF sits inside APP1 and must not be taken.
"$convert" -size 16x12 xc:purple -strip -quality 50 "$tmp/thumb.jpg"
"$convert" -size 120x80 plasma:fractal -seed 7 -strip -quality 40 exif-thumbnail.jpg 2>/dev/null \
  || "$convert" -size 120x80 gradient:white-black -strip -quality 40 exif-thumbnail.jpg
exiftool -q -overwrite_original "-ThumbnailImage<=$tmp/thumb.jpg" -Make=GroupContainer exif-thumbnail.jpg

# GIF: 87a still 33x21; 89a animated, 3 frames of 27x17.
"$convert" -size 33x21 gradient:black-white -colors 16 GIF87:still87a.gif
"$convert" -size 27x17 -delay 10 xc:red xc:lime xc:blue -loop 0 +repage animated89a.gif

# WebP: lossy (VP8) 45x35, lossless (VP8L) 47x27, extended with alpha (VP8X + ALPH) 49x39, animated (ANMF) 51x25.
"$convert" -size 45x35 gradient:red-cyan "$tmp/lossy.png"
cwebp -quiet -q 50 -metadata none "$tmp/lossy.png" -o lossy.webp
"$convert" -size 47x27 gradient:blue-white "$tmp/lossless.png"
cwebp -quiet -lossless -metadata none "$tmp/lossless.png" -o lossless.webp
"$convert" -size 49x39 gradient:'rgba(255,0,0,1)-rgba(0,0,255,0.2)' PNG32:"$tmp/alpha.png"
cwebp -quiet -q 50 -alpha_q 50 -metadata none "$tmp/alpha.png" -o alpha.webp
for i in 1 2 3; do "$convert" -size 51x25 xc:"gray$((i * 30))" "$tmp/frame$i.png"; done
img2webp -loop 0 -d 100 -lossy "$tmp/frame1.png" "$tmp/frame2.png" "$tmp/frame3.png" -o animated.webp >/dev/null

ls -l *.png *.jpg *.gif *.webp
