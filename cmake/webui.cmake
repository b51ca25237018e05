# The built-in chat page of `mimo serve`: every file of src/server/webui/ becomes bytes in a
# generated source of mimo_server (cmake/embed_webui.cmake), regenerated when any of them
# changes. No Node or other build step: the page is plain HTML, CSS and JavaScript.
file(GLOB MIMO_WEBUI_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/webui/*)
set(MIMO_WEBUI_SOURCE ${CMAKE_BINARY_DIR}/generated/webui_assets.cc)
add_custom_command(
  OUTPUT ${MIMO_WEBUI_SOURCE}
  COMMAND ${CMAKE_COMMAND} -DINPUT_DIR=${CMAKE_SOURCE_DIR}/src/server/webui
          -DOUTPUT=${MIMO_WEBUI_SOURCE} -P ${CMAKE_SOURCE_DIR}/cmake/embed_webui.cmake
  DEPENDS ${MIMO_WEBUI_FILES} ${CMAKE_SOURCE_DIR}/cmake/embed_webui.cmake
  COMMENT "Embedding the web UI (src/server/webui)"
  VERBATIM)
target_sources(mimo_server PRIVATE ${MIMO_WEBUI_SOURCE})
