/* The router's pure parts (fcgi-app/http.h): a path against a route
 * pattern ('*' one segment, a trailing slash tolerated) and the JSON
 * content type the router asks of NEED_JSON routes. */
#include <stdlib.h>
#include <string.h>

#include "../../fcgi-app/http.h"
#include "unit.h"

int main(void)
{
	char seg128[129], seg129[130], path[200];
	memset(seg128, 'a', 128);
	seg128[128] = '\0';
	memset(seg129, 'b', 129);
	seg129[129] = '\0';
	static const struct {
		const char *pattern, *path;
		int match;
		const char *param;
	} cases[] = {
	    {"/api/lessons", "/api/lessons", 1, NULL},
	    {"/api/lessons", "/api/lessons/", 1, NULL},
	    {"/api/lessons", "/api/lessons//", 0, NULL},
	    {"/api/lessons", "/api/lesson", 0, NULL},
	    {"/api/lessons", "/api/lessonsx", 0, NULL},
	    {"/api/sessions/*", "/api/sessions/abc", 1, "abc"},
	    {"/api/sessions/*", "/api/sessions/abc/", 1, "abc"},
	    {"/api/sessions/*", "/api/sessions/", 0, NULL},
	    {"/api/sessions/*", "/api/sessions", 0, NULL},
	    {"/api/sessions/*", "/api/sessions/abc/grade", 0, NULL},
	    {"/api/sessions/*/grade", "/api/sessions/abc/grade", 1, "abc"},
	    {"/api/sessions/*/grade", "/api/sessions/abc/tty-size", 0, NULL},
	    {"/api/sessions/*/grade", "/api/sessions//grade", 0, NULL},
	    {"/api/lessons/*/guide", "/api/lessons/linux-basics/guide/", 1, "linux-basics"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *param = (char *)"unset";
		int m = http_path_match(cases[i].pattern, cases[i].path, &param);
		int ok = m == cases[i].match &&
		         (cases[i].param ? param && strcmp(param, cases[i].param) == 0 : !param);
		CHECK(ok, "%s %s %s%s%s", cases[i].path, m ? "matches" : "does not match",
		      cases[i].pattern, param ? ", {id} " : "", param ? param : "");
		free(param);
	}
	char *param = NULL;
	snprintf(path, sizeof path, "/api/sessions/%s", seg128);
	CHECK(http_path_match("/api/sessions/*", path, &param) == 1 && param &&
	          strlen(param) == 128,
	      "a segment of 128 bytes is an {id}");
	free(param);
	snprintf(path, sizeof path, "/api/sessions/%s", seg129);
	CHECK(http_path_match("/api/sessions/*", path, &param) == 0 && !param,
	      "a segment of 129 bytes is none");

	static const struct {
		const char *ct;
		int json;
	} types[] = {
	    {"application/json", 1},   {"Application/JSON; charset=utf-8", 1},
	    {"  application/json", 1}, {"application/json ;x=1", 1},
	    {"application/jsonx", 0},  {"application/json-seq", 0},
	    {"text/plain", 0},         {"", 0},
	};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		CHECK(http_is_json_type(types[i].ct) == types[i].json, "\"%s\" is %sJSON",
		      types[i].ct, types[i].json ? "" : "not ");
	CHECK(!http_is_json_type(NULL), "no Content-Type is not JSON");
	return unit_done();
}
