// File: data/stb_config.h
// The stb_image configuration every includer shares, so declarations agree
// with the implementation compiled in data/stb_image.cc.
#pragma once

#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO
// 4096 x 4096 x 4 channels = 64 MiB: the most one image may decode to.
#define STBI_MAX_DIMENSIONS 4096
