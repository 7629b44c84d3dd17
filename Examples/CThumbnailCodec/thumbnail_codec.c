// See thumbnail_codec.h. Every libpng/libjpeg call that may fail runs under a setjmp set up in this file; state
// that must survive the longjmp lives in heap memory reached through a pointer set before the setjmp.
#include "thumbnail_codec.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>
#include <jpeglib.h>

// Each side's bound: JPEG's own limit is 65500; a wider PNG row would only be a way to ask for a huge row buffer.
#define MAX_SIDE 65535
// Interlaced PNGs arrive in seven passes over the whole image, so they are decoded whole: only up to this size.
#define MAX_INTERLACED_PIXELS (4 << 20)

// The box filter: each source pixel adds to the output pixel its position falls in, row by row.
typedef struct {
  int32_t sw, sh, tw, th;
  int identity;
  uint64_t *sums;   // tw * th * 3 (not with identity)
  uint32_t *counts; // tw * th
  uint8_t *pixels;  // tw * th * 3
  uint8_t *row;     // one source row (RGB, or the whole image for interlaced PNGs)
  uint8_t *whole;
} decode_state;

static void state_free(decode_state *s, int keep_pixels) {
  if (!s) return;
  free(s->sums);
  free(s->counts);
  free(s->row);
  free(s->whole);
  if (!keep_pixels) free(s->pixels);
  free(s);
}

static int box_begin(decode_state *s, int32_t sw, int32_t sh, int32_t tw, int32_t th, gc_thumbnail *out) {
  if (tw <= 0 || th <= 0) { tw = sw; th = sh; }
  if (tw > sw) tw = sw;
  if (th > sh) th = sh;
  s->sw = sw; s->sh = sh; s->tw = tw; s->th = th;
  s->identity = tw == sw && th == sh;
  size_t n = (size_t)tw * (size_t)th;
  s->pixels = malloc(n * 3);
  if (!s->identity) {
    s->sums = calloc(n * 3, sizeof(uint64_t));
    s->counts = calloc(n, sizeof(uint32_t));
  }
  if (!s->pixels || (!s->identity && (!s->sums || !s->counts))) {
    snprintf(out->message, sizeof out->message, "out of memory for a %dx%d thumbnail", tw, th);
    return GC_CODEC_NO_MEMORY;
  }
  out->width = tw;
  out->height = th;
  return GC_CODEC_OK;
}

static void box_add_row(decode_state *s, int32_t y, const uint8_t *rgb) {
  if (s->identity) {
    memcpy(s->pixels + (size_t)y * s->sw * 3, rgb, (size_t)s->sw * 3);
    return;
  }
  size_t oy = (size_t)((int64_t)y * s->th / s->sh);
  for (int32_t x = 0; x < s->sw; x++) {
    size_t i = oy * s->tw + (size_t)((int64_t)x * s->tw / s->sw);
    s->sums[i * 3] += rgb[x * 3];
    s->sums[i * 3 + 1] += rgb[x * 3 + 1];
    s->sums[i * 3 + 2] += rgb[x * 3 + 2];
    s->counts[i] += 1;
  }
}

static void box_finish(decode_state *s) {
  if (s->identity) return;
  size_t n = (size_t)s->tw * s->th;
  for (size_t i = 0; i < n; i++) {
    uint64_t c = s->counts[i] ? s->counts[i] : 1;
    for (int k = 0; k < 3; k++) s->pixels[i * 3 + k] = (uint8_t)((s->sums[i * 3 + k] + c / 2) / c);
  }
}

static int check_bounds(const char *format, uint32_t w, uint32_t h, int64_t max_pixels, gc_thumbnail *out) {
  out->source_width = (int32_t)(w > INT32_MAX ? INT32_MAX : w);
  out->source_height = (int32_t)(h > INT32_MAX ? INT32_MAX : h);
  if (w == 0 || h == 0) {
    snprintf(out->message, sizeof out->message, "%s of %ux%u pixels has no pixels", format, w, h);
    return GC_CODEC_CORRUPT;
  }
  if (w > MAX_SIDE || h > MAX_SIDE || (int64_t)w * (int64_t)h > max_pixels) {
    snprintf(out->message, sizeof out->message, "%s of %ux%u pixels is over the bound of %lld pixels (%d a side)",
             format, w, h, (long long)max_pixels, MAX_SIDE);
    return GC_CODEC_TOO_LARGE;
  }
  return GC_CODEC_OK;
}

// MARK: PNG

typedef struct {
  const uint8_t *data;
  size_t size, offset;
} png_source;

static void png_read_bytes(png_structp png, png_bytep into, png_size_t count) {
  png_source *source = png_get_io_ptr(png);
  if (count > source->size - source->offset) png_error(png, "truncated PNG: the data ends before the image does");
  memcpy(into, source->data + source->offset, count);
  source->offset += count;
}

static void png_fail(png_structp png, png_const_charp message) {
  gc_thumbnail *out = png_get_error_ptr(png);
  if (out) snprintf(out->message, sizeof out->message, "PNG: %s", message);
  png_longjmp(png, 1);
}

// libpng's warnings (an unknown chunk, a bad sRGB profile) are not errors: the image still decodes.
static void png_warn(png_structp png, png_const_charp message) { (void)png; (void)message; }

int gc_decode_png(const uint8_t *data, size_t size, int64_t max_pixels, int32_t target_width,
                  int32_t target_height, gc_thumbnail *out) {
  memset(out, 0, sizeof *out);
  if (size < 8 || png_sig_cmp((png_const_bytep)data, 0, 8) != 0) {
    snprintf(out->message, sizeof out->message, "not a PNG: the 8-byte signature is missing");
    return GC_CODEC_CORRUPT;
  }
  decode_state *state = calloc(1, sizeof *state);
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, out, png_fail, png_warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!state || !png || !info) {
    if (png) png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    free(state);
    snprintf(out->message, sizeof out->message, "out of memory for the PNG decoder");
    return GC_CODEC_NO_MEMORY;
  }
  png_source source = {data, size, 0};
  volatile int status = GC_CODEC_CORRUPT;
  if (setjmp(png_jmpbuf(png))) goto done;
  png_set_user_limits(png, MAX_SIDE, MAX_SIDE);
  png_set_chunk_malloc_max(png, 16 << 20);
  png_set_read_fn(png, &source, png_read_bytes);
  png_read_info(png, info);
  png_uint_32 w, h;
  int depth, color, interlace;
  png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, NULL, NULL);
  if ((status = check_bounds("PNG", w, h, max_pixels, out)) != GC_CODEC_OK) goto done;
  status = GC_CODEC_CORRUPT;
  // Any PNG to 8-bit RGB: palettes and low bit depths expanded, 16 bits stripped, gray copied, alpha dropped.
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != (size_t)w * 3) png_error(png, "unexpected row layout after conversion to RGB");
  if ((status = box_begin(state, (int32_t)w, (int32_t)h, target_width, target_height, out)) != GC_CODEC_OK) goto done;
  status = GC_CODEC_CORRUPT;
  if (passes > 1) {
    if ((int64_t)w * h > MAX_INTERLACED_PIXELS) {
      snprintf(out->message, sizeof out->message,
               "interlaced PNG of %ux%u pixels: over the %d pixels decoded whole", w, h, MAX_INTERLACED_PIXELS);
      status = GC_CODEC_TOO_LARGE;
      goto done;
    }
    state->whole = calloc((size_t)w * h, 3);
    if (!state->whole) png_error(png, "out of memory for an interlaced image");
    for (int pass = 0; pass < passes; pass++)
      for (png_uint_32 y = 0; y < h; y++) png_read_row(png, state->whole + (size_t)y * w * 3, NULL);
    for (png_uint_32 y = 0; y < h; y++) box_add_row(state, (int32_t)y, state->whole + (size_t)y * w * 3);
  } else {
    state->row = malloc((size_t)w * 3);
    if (!state->row) png_error(png, "out of memory for a row");
    for (png_uint_32 y = 0; y < h; y++) {
      png_read_row(png, state->row, NULL);
      box_add_row(state, (int32_t)y, state->row);
    }
  }
  png_read_end(png, NULL);
  box_finish(state);
  out->pixels = state->pixels;
  status = GC_CODEC_OK;
done:
  png_destroy_read_struct(&png, &info, NULL);
  if (status != GC_CODEC_OK) { out->width = 0; out->height = 0; out->pixels = NULL; }
  state_free(state, status == GC_CODEC_OK);
  return status;
}

// MARK: JPEG

typedef struct {
  struct jpeg_error_mgr manager;
  jmp_buf jump;
  gc_thumbnail *out;
} jpeg_failure;

static void jpeg_fail(j_common_ptr info) {
  jpeg_failure *failure = (jpeg_failure *)info->err;
  char text[JMSG_LENGTH_MAX];
  (*info->err->format_message)(info, text);
  snprintf(failure->out->message, sizeof failure->out->message, "JPEG: %s", text);
  longjmp(failure->jump, 1);
}

// A warning (level -1) is corrupt data that libjpeg would paper over with gray (a truncated file, a bad Huffman
// code): refused like an error, so a damaged image is reported rather than drawn half gray.
static void jpeg_message(j_common_ptr info, int level) {
  if (level < 0) jpeg_fail(info);
}

static void jpeg_silent(j_common_ptr info) { (void)info; }

int gc_decode_jpeg(const uint8_t *data, size_t size, int64_t max_pixels, int64_t max_memory, int32_t target_width,
                   int32_t target_height, gc_thumbnail *out) {
  memset(out, 0, sizeof *out);
  if (size < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF) {
    snprintf(out->message, sizeof out->message, "not a JPEG: the start-of-image marker is missing");
    return GC_CODEC_CORRUPT;
  }
  decode_state *state = calloc(1, sizeof *state);
  struct jpeg_decompress_struct *info = calloc(1, sizeof *info);
  jpeg_failure *failure = calloc(1, sizeof *failure);
  if (!state || !info || !failure) {
    free(state); free(info); free(failure);
    snprintf(out->message, sizeof out->message, "out of memory for the JPEG decoder");
    return GC_CODEC_NO_MEMORY;
  }
  failure->out = out;
  info->err = jpeg_std_error(&failure->manager);
  failure->manager.error_exit = jpeg_fail;
  failure->manager.emit_message = jpeg_message;
  failure->manager.output_message = jpeg_silent;
  volatile int status = GC_CODEC_CORRUPT;
  volatile int created = 0;
  if (setjmp(failure->jump)) goto done;
  jpeg_create_decompress(info);
  created = 1;
  // Past this, libjpeg fails with "backing store not supported" instead of allocating (a progressive JPEG keeps
  // all its coefficients).
  if (max_memory > 0) info->mem->max_memory_to_use = (long)max_memory;
  jpeg_mem_src(info, data, (unsigned long)size);
  jpeg_read_header(info, TRUE);
  if ((status = check_bounds("JPEG", info->image_width, info->image_height, max_pixels, out)) != GC_CODEC_OK) goto done;
  status = GC_CODEC_CORRUPT;
  info->out_color_space = JCS_RGB;
  // libjpeg scales by 1/2, 1/4 or 1/8 in the IDCT almost for free: the largest that still leaves at least the
  // target's pixels.
  int32_t tw = target_width > 0 ? target_width : (int32_t)info->image_width;
  int32_t th = target_height > 0 ? target_height : (int32_t)info->image_height;
  unsigned denominator = 1;
  for (unsigned d = 8; d > 1; d /= 2) {
    if ((info->image_width + d - 1) / d >= (unsigned)tw && (info->image_height + d - 1) / d >= (unsigned)th) {
      denominator = d;
      break;
    }
  }
  info->scale_num = 1;
  info->scale_denom = denominator;
  jpeg_start_decompress(info);
  if (info->output_components != 3) {
    snprintf(out->message, sizeof out->message, "JPEG: %d components after conversion to RGB", info->output_components);
    goto done;
  }
  int32_t ow = (int32_t)info->output_width, oh = (int32_t)info->output_height;
  // The target keeps its size: scaled down by libjpeg first, the box filter makes the rest.
  if ((status = box_begin(state, ow, oh, target_width > 0 ? tw : 0, target_height > 0 ? th : 0, out)) != GC_CODEC_OK)
    goto done;
  status = GC_CODEC_CORRUPT;
  state->row = malloc((size_t)ow * 3);
  if (!state->row) {
    snprintf(out->message, sizeof out->message, "out of memory for a row");
    status = GC_CODEC_NO_MEMORY;
    goto done;
  }
  while (info->output_scanline < info->output_height) {
    JSAMPROW rows[1] = {state->row};
    int32_t y = (int32_t)info->output_scanline;
    if (jpeg_read_scanlines(info, rows, 1) != 1) {
      snprintf(out->message, sizeof out->message, "JPEG: no scanline %d", y);
      goto done;
    }
    box_add_row(state, y, state->row);
  }
  jpeg_finish_decompress(info);
  box_finish(state);
  out->pixels = state->pixels;
  status = GC_CODEC_OK;
done:
  if (created) jpeg_destroy_decompress(info);
  if (status != GC_CODEC_OK) { out->width = 0; out->height = 0; out->pixels = NULL; }
  state_free(state, status == GC_CODEC_OK);
  free(info);
  free(failure);
  return status;
}

// MARK: Encoding (the demo's and the tests' images)

typedef struct {
  uint8_t *bytes;
  size_t size, capacity;
} png_sink;

static void png_write_bytes(png_structp png, png_bytep data, png_size_t count) {
  png_sink *sink = png_get_io_ptr(png);
  if (sink->size + count > sink->capacity) {
    size_t capacity = (sink->capacity ? sink->capacity * 2 : 65536);
    while (capacity < sink->size + count) capacity *= 2;
    uint8_t *bytes = realloc(sink->bytes, capacity);
    if (!bytes) png_error(png, "out of memory for the encoded PNG");
    sink->bytes = bytes;
    sink->capacity = capacity;
  }
  memcpy(sink->bytes + sink->size, data, count);
  sink->size += count;
}

static void png_flush_nothing(png_structp png) { (void)png; }

static void png_encode_fail(png_structp png, png_const_charp message) {
  char *text = png_get_error_ptr(png);
  if (text) snprintf(text, 200, "PNG: %s", message);
  png_longjmp(png, 1);
}

int gc_encode_png(const uint8_t *rgb, int32_t width, int32_t height, uint8_t **out, size_t *out_size,
                  char *message) {
  *out = NULL;
  *out_size = 0;
  png_sink *sink = calloc(1, sizeof *sink);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, message, png_encode_fail, png_warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!sink || !png || !info) {
    if (png) png_destroy_write_struct(&png, info ? &info : NULL);
    free(sink);
    snprintf(message, 200, "out of memory for the PNG encoder");
    return GC_CODEC_NO_MEMORY;
  }
  volatile int status = GC_CODEC_CORRUPT;
  if (setjmp(png_jmpbuf(png))) goto done;
  png_set_write_fn(png, sink, png_write_bytes, png_flush_nothing);
  png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int32_t y = 0; y < height; y++) png_write_row(png, (png_const_bytep)(rgb + (size_t)y * width * 3));
  png_write_end(png, NULL);
  *out = sink->bytes;
  *out_size = sink->size;
  sink->bytes = NULL;
  status = GC_CODEC_OK;
done:
  png_destroy_write_struct(&png, &info);
  free(sink->bytes);
  free(sink);
  return status;
}

int gc_encode_jpeg(const uint8_t *rgb, int32_t width, int32_t height, int32_t quality, uint8_t **out,
                   size_t *out_size, char *message) {
  *out = NULL;
  *out_size = 0;
  struct jpeg_compress_struct *info = calloc(1, sizeof *info);
  jpeg_failure *failure = calloc(1, sizeof *failure);
  gc_thumbnail *text = calloc(1, sizeof *text);
  if (!info || !failure || !text) {
    free(info); free(failure); free(text);
    snprintf(message, 200, "out of memory for the JPEG encoder");
    return GC_CODEC_NO_MEMORY;
  }
  failure->out = text;
  info->err = jpeg_std_error(&failure->manager);
  failure->manager.error_exit = jpeg_fail;
  failure->manager.output_message = jpeg_silent;
  unsigned char *volatile *bytes = calloc(1, sizeof(unsigned char *));
  unsigned long *length = calloc(1, sizeof(unsigned long));
  volatile int status = GC_CODEC_CORRUPT;
  volatile int created = 0;
  if (!bytes || !length) { status = GC_CODEC_NO_MEMORY; goto done; }
  if (setjmp(failure->jump)) goto done;
  jpeg_create_compress(info);
  created = 1;
  jpeg_mem_dest(info, (unsigned char **)bytes, length);
  info->image_width = (JDIMENSION)width;
  info->image_height = (JDIMENSION)height;
  info->input_components = 3;
  info->in_color_space = JCS_RGB;
  jpeg_set_defaults(info);
  jpeg_set_quality(info, quality, TRUE);
  jpeg_start_compress(info, TRUE);
  while (info->next_scanline < info->image_height) {
    JSAMPROW row = (JSAMPROW)(rgb + (size_t)info->next_scanline * width * 3);
    jpeg_write_scanlines(info, &row, 1);
  }
  jpeg_finish_compress(info);
  *out = *bytes;
  *out_size = *length;
  *bytes = NULL;
  status = GC_CODEC_OK;
done:
  if (created) jpeg_destroy_compress(info);
  if (status != GC_CODEC_OK) snprintf(message, 200, "%s", text->message[0] ? text->message : "JPEG: cannot encode");
  // Not *bytes after a failure: libjpeg's memory destination may already have freed and replaced it.
  free((void *)bytes);
  free(length);
  free(info);
  free(failure);
  free(text);
  return status;
}

void gc_codec_free(void *pointer) { free(pointer); }
