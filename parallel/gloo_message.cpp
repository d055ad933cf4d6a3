#include "parallel/gloo_message.h"

namespace dit {

std::string clean_gloo_message(std::string msg) {
  while (!msg.empty() && msg[0] == '[') {
    const auto end = msg.find("] ");
    if (end == std::string::npos) break;
    msg = msg.substr(end + 2);
  }
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

}  // namespace dit
