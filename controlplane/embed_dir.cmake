# Writes every file of the folder DIR into OUT as one C table, in name
# order, ending with a zeroed row. Run at build time by
# controlplane/CMakeLists.txt for the web console's assets
# (controlplane/console/, served by api/cp_console.c) and the schema's
# migrations (controlplane/store/migrations/, run by store/cp_migrate.c).
#
#   DIR, OUT   the folder, and the C file written
#   TABLE      the table's name; TYPE its row type, declared in INCLUDE
#   MATCH      a regular expression every file name must match: anything
#              else in the folder is a build error (WHAT says what the
#              folder holds), so nothing lands in the binary by accident
#   NUMBERED   the names are NNNN_<slug>.<ext>, numbered 1, 2, 3, ... with
#              no gap and no duplicate (else a build error)
#
# A row is {"<file>", bytes, length} or, NUMBERED, {N, "<slug with _ as
# space>", "<file>", bytes, length}. The bytes are NUL-terminated (the
# length does not count it); the row's pointer is a const void *, so the
# row type may declare them char or unsigned char.
file(GLOB files RELATIVE ${DIR} ${DIR}/*)
list(SORT files)
set(arrays "")
set(rows "")
set(i 0)
if(NUMBERED)
  set(zero "{0, 0, 0, 0, 0}")
else()
  set(zero "{0, 0, 0}")
endif()
foreach(f ${files})
  if(NOT f MATCHES "${MATCH}")
    message(FATAL_ERROR "embed_dir: ${DIR}/${f} is not ${WHAT}")
  endif()
  file(READ ${DIR}/${f} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND arrays "static const unsigned char f${i}[] = {${bytes} 0};\n")
  math(EXPR n "${i} + 1")
  if(NUMBERED)
    if(NOT f MATCHES "^([0-9][0-9][0-9][0-9])_([a-z0-9_]+)\\.[a-z]+$")
      message(FATAL_ERROR "embed_dir: ${DIR}/${f} is not named NNNN_<slug>.<ext>")
    endif()
    set(slug "${CMAKE_MATCH_2}")
    string(REGEX REPLACE "^0+" "" num "${CMAKE_MATCH_1}")
    if(NOT num STREQUAL "${n}")
      message(FATAL_ERROR "embed_dir: ${DIR}/${f}: expected number ${n} here (a gap or a duplicate)")
    endif()
    string(REPLACE "_" " " title "${slug}")
    string(APPEND rows "    {${n}, \"${title}\", \"${f}\", (const void *)f${i}, sizeof(f${i}) - 1},\n")
  else()
    string(APPEND rows "    {\"${f}\", (const void *)f${i}, sizeof(f${i}) - 1},\n")
  endif()
  set(i ${n})
endforeach()
file(WRITE ${OUT} "/* Generated from ${DIR} by controlplane/embed_dir.cmake. */\n"
     "#include \"${INCLUDE}\"\n${arrays}"
     "const struct ${TYPE} ${TABLE}[] = {\n${rows}    ${zero}};\n")
