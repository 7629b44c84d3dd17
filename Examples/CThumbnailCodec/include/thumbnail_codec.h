// PNG and JPEG through libpng and libjpeg-turbo, with every library error caught here (both report errors by
// longjmp, which must not cross Swift frames) and turned into a return code and a message.
#ifndef THUMBNAIL_CODEC_H
#define THUMBNAIL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define GC_CODEC_OK 0
#define GC_CODEC_CORRUPT 1    // the library refused the bytes (truncated, bad CRC, garbage): see message
#define GC_CODEC_TOO_LARGE 2  // the image's dimensions are over the caller's pixel bound: nothing was decoded
#define GC_CODEC_NO_MEMORY 3

typedef struct {
  int32_t source_width, source_height;  // what the header says (set before GC_CODEC_TOO_LARGE too)
  int32_t width, height;                // the output's size (the target's)
  uint8_t *pixels;                      // width * height * 3 bytes, RGB; free with gc_codec_free
  char message[200];
} gc_thumbnail;

// Decodes PNG (gc_decode_png) or JPEG (gc_decode_jpeg) `data` into an RGB thumbnail of exactly
// target_width x target_height (box filter, row by row: memory is a few rows of the source plus the output, never
// the whole source; interlaced PNGs, which come in passes, are the exception and are refused over 4 Mpx).
// max_pixels bounds source_width * source_height (and each side is at most 65535); max_memory bounds libjpeg's working memory (progressive JPEGs keep
// every coefficient). A target of 0 x 0 means the source's own size.
int gc_decode_png(const uint8_t *data, size_t size, int64_t max_pixels, int32_t target_width,
                  int32_t target_height, gc_thumbnail *out);
int gc_decode_jpeg(const uint8_t *data, size_t size, int64_t max_pixels, int64_t max_memory, int32_t target_width,
                   int32_t target_height, gc_thumbnail *out);

// Encodes width x height RGB pixels; *out is malloc'ed (free with gc_codec_free). message gets 200 bytes.
int gc_encode_png(const uint8_t *rgb, int32_t width, int32_t height, uint8_t **out, size_t *out_size,
                  char *message);
int gc_encode_jpeg(const uint8_t *rgb, int32_t width, int32_t height, int32_t quality, uint8_t **out,
                   size_t *out_size, char *message);

void gc_codec_free(void *pointer);

#endif
