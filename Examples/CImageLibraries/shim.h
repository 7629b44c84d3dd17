// Debian's libpng (libpng-dev) and libjpeg-turbo (libjpeg62-turbo-dev). Only CThumbnailCodec includes these
// headers: their errors longjmp, which Swift code must never see.
#include <stdio.h>
#include <png.h>
#include <jpeglib.h>
