# Writes every file of the folder DIR (the web console's assets,
# controlplane/console/) into OUT as one C table, cp_console_files: its
# name, bytes and length, in name order. Run at build time by
# controlplane/CMakeLists.txt; the control plane serves the table at
# /console/ (controlplane/api/cp_console.c). Only names of
# [a-z0-9_.-] ending in .html, .js, .css or .svg are taken: anything
# else in the folder is a build error, so nothing lands in the binary by
# accident.
file(GLOB files RELATIVE ${DIR} ${DIR}/*)
list(SORT files)
set(arrays "")
set(rows "")
set(i 0)
foreach(f ${files})
  if(NOT f MATCHES "^[a-z0-9_.-]+\\.(html|js|css|svg)$")
    message(FATAL_ERROR "console_embed: ${DIR}/${f} is not a console asset (html, js, css, svg)")
  endif()
  file(READ ${DIR}/${f} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND arrays "static const unsigned char f${i}[] = {${bytes} 0};\n")
  string(APPEND rows "    {\"${f}\", f${i}, sizeof(f${i}) - 1},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE ${OUT} "/* Generated from ${DIR} by controlplane/console_embed.cmake. */\n"
     "#include \"cp_console.h\"\n${arrays}"
     "const struct cp_console_file cp_console_files[] = {\n${rows}    {0, 0, 0}};\n")
