#include "models/dit/imagenet_labels.h"

#include <map>

namespace dit {

std::string imagenet_label(int id) {
  static const std::map<int, std::string> known = {
      {0, "tench, Tinca tinca"},
      {1, "goldfish, Carassius auratus"},
      {2, "great white shark, white shark, man-eater, man-eating shark, Carcharodon carcharias"},
      {3, "tiger shark, Galeocerdo cuvieri"},
      {4, "hammerhead, hammerhead shark"},
      {5, "electric ray, crampfish, numbfish, torpedo"},
      {6, "stingray"},
      {7, "cock"},
      {8, "hen"},
      {9, "ostrich, Struthio camelus"},
      {10, "brambling, Fringilla montifringilla"},
      {11, "goldfinch, Carduelis carduelis"},
      {12, "house finch, linnet, Carpodacus mexicanus"},
      {13, "junco, snowbird"},
      {14, "indigo bunting, indigo finch, indigo bird, Passerina cyanea"},
      {15, "robin, American robin, Turdus migratorius"},
      {16, "bulbul"},
      {17, "jay"},
      {18, "magpie"},
      {19, "chickadee"},
      {88, "macaw"},
      {207, "golden retriever"},
      {279, "Arctic fox, white fox, Alopex lagopus"},
      {281, "tabby, tabby cat"},
      {291, "lion, king of beasts, Panthera leo"},
      {360, "otter"},
      {388, "giant panda, panda, panda bear, coon bear, Ailuropoda melanoleuca"},
      {417, "balloon"},
      {812, "space shuttle"},
      {817, "sports car, sport car"},
      {933, "cheeseburger"},
      {963, "pizza, pizza pie"},
      {974, "geyser"},
      {980, "volcano"},
  };
  auto it = known.find(id);
  return it != known.end() ? it->second : "class " + std::to_string(id);
}

}  // namespace dit
