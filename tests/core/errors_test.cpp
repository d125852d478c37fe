#include <doctest/doctest.h>

#include <string>

#include "core/errors.h"

using tctl::quote_for_message;

TEST_CASE("quote_for_message quotes a user's text as one short, printable line") {
  CHECK(quote_for_message("abc") == "\"abc\"");
  CHECK(quote_for_message("") == "\"\"");
  CHECK(quote_for_message("said \"hi\" \\ there") == "\"said \\\"hi\\\" \\\\ there\"");
  // Line breaks, tabs, terminal escapes and NUL are escaped, so the message stays one line and nothing in it
  // reaches the terminal as a control sequence or cuts the text short.
  CHECK(quote_for_message("a\nb\tc") == "\"a\\nb\\tc\"");
  CHECK(quote_for_message(std::string("3\x1b[2J", 5)) == "\"3\\u001b[2J\"");
  CHECK(quote_for_message(std::string("x\0y", 3)) == "\"x\\u0000y\"");
  // UTF-8 passes through; bytes that are not UTF-8 show as \xNN.
  CHECK(quote_for_message("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
  CHECK(quote_for_message("a\xff\xc3") == "\"a\\xff\\xc3\"");
  // Overlong forms and surrogates are not UTF-8 either.
  CHECK(quote_for_message("\xc0\xaf") == "\"\\xc0\\xaf\"");
  CHECK(quote_for_message("\xed\xa0\x80") == "\"\\xed\\xa0\\x80\"");
  // C1 controls (CSI, U+009B, starts a terminal escape on some terminals) and the line separators are escaped.
  CHECK(quote_for_message("a\xc2\x9b"
                          "2Jb") == "\"a\\u009b2Jb\"");
  CHECK(quote_for_message("a\xe2\x80\xa8"
                          "b") == "\"a\\u2028b\"");
  CHECK(tctl::has_control_character("a\xc2\x85"));
  CHECK_FALSE(tctl::has_control_character("caf\xc3\xa9"));
  // Cut to 100 bytes, never inside a character.
  CHECK(quote_for_message(std::string(5000, 'a')) == "\"" + std::string(100, 'a') + "\"...");
  const std::string accents = std::string(99, 'a') + "\xc3\xa9" + "tail";
  CHECK(quote_for_message(accents) == "\"" + std::string(99, 'a') + "\"...");
}

TEST_CASE("printable_line keeps a message on one line and away from the terminal's controls") {
  using tctl::printable_line;
  CHECK(printable_line("run/model.json: layers[0]: caf\xc3\xa9") == "run/model.json: layers[0]: caf\xc3\xa9");
  // Line breaks and tabs become spaces; nothing is quoted or cut, as this is the whole message.
  CHECK(printable_line("a\nb\r\tc") == "a b  c");
  CHECK(printable_line(std::string(300, 'x')).size() == 300);
  // Other controls, C1 included, and bytes that are not UTF-8 are escaped as quote_for_message escapes them.
  CHECK(printable_line(std::string("x\x1b[2J\0y\x7f", 8)) == "x\\u001b[2J\\u0000y\\u007f");
  CHECK(printable_line("a\xc2\x9b"
                       "2Jb") == "a\\u009b2Jb");
  CHECK(printable_line("a\xff\xc0\xaf") == "a\\xff\\xc0\\xaf");
  CHECK(printable_line("a\xe2\x80\xa8"
                       "b") == "a\\u2028b");
  CHECK_FALSE(tctl::has_control_character(printable_line("\x01\x1f\xc2\x85\xc2\x80\x9b")));
}

TEST_CASE("quote_for_message cuts before a character or an escape that would cross its 100 bytes") {
  const std::string a99(99, 'a');
  CHECK(quote_for_message(a99 + "\xc2\x9b") == "\"" + a99 + "\"...");
  CHECK(quote_for_message(a99 + "\xc3\xa9") == "\"" + a99 + "\"...");
  CHECK(quote_for_message(a99 + "b\r") == "\"" + a99 + "b\"...");
  CHECK(quote_for_message(a99 + "\r") == "\"" + a99 + "\\u000d\"");
}
