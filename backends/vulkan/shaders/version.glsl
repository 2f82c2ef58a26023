// The GLSL version and the extensions every shader uses. A shader that needs more includes
// this first, then its own #extension lines, then common.glsl (each file is inserted once).
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
