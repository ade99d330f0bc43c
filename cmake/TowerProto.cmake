# tw_protoc_c(OUT_SRCS OUT_DIR proto...): compiles .proto files with protoc-c at build time into
# OUT_DIR and returns the generated .c files.
find_program(TW_PROTOC_C protoc-c REQUIRED)

function(tw_protoc_c out_srcs out_dir)
  set(srcs "")
  foreach(proto ${ARGN})
    get_filename_component(name ${proto} NAME_WE)
    get_filename_component(dir ${proto} DIRECTORY)
    set(c ${out_dir}/${name}.pb-c.c)
    set(h ${out_dir}/${name}.pb-c.h)
    add_custom_command(
      OUTPUT ${c} ${h}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
      COMMAND ${TW_PROTOC_C} --c_out=${out_dir} -I${dir} ${proto}
      DEPENDS ${proto}
      COMMENT "protoc-c ${name}.proto"
      VERBATIM)
    list(APPEND srcs ${c})
  endforeach()
  set(${out_srcs} ${srcs} PARENT_SCOPE)
endfunction()
